"""The first study: semi-supervised sequence classification with local auxiliary losses and
a hidden state split into private and shared parts (GRU baseline, full share, private/shared
variants; MNIST, Fashion-MNIST, CIFAR-10, IMDB characters, DBpedia).

settings (RunConfig), hooks (what the engine calls), epoch (one epoch's steps), models,
recurrent, decoders, naive (the reference model), datasets and data/ (download, prepare,
load), params (parameter counts), recipe (the recipe study on real digits), results/ (its
tables, figures and REPORT).
"""

"""The studies the suite reproduces, one folder each (psrnn.registry names them by string):
private_shared (the first study: private and shared representations in RNNs) and relreg
(the second: relation-level regularization). A study imports the core, the engine and the
report toolkit, never another study (tests/test_style.py checks it).
"""

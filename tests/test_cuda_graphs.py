"""CUDA graphs in training (RunConfig.cuda_graphs, psrnn.studies.private_shared.epoch.GraphedPieces), on
the CPU.

A real graph needs a GPU (`python -m psrnn bench --only options` measures it there and
checks the graphed run trains the very parameters of the eager one). Here: which shapes
are graphed and when, and that training through the graphed code path (a stand-in for
torch.cuda.make_graphed_callables that does what it does on the CPU: warm-up calls of
torch.autograd.grad, then forward and backward through one autograd node) gives the
eager run bit for bit, baseline and auxiliary models, text and images."""

import dataclasses
import gc

import pytest
import torch
from test_training import quiet, read_history, small_cfg, stable, write_images, write_text

from psrnn.engine.checkpoint import config_differences
from psrnn.engine.fit import fit
from psrnn.studies.private_shared import epoch
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.models import build_model


def cpu_graph(module, sample_args, allow_unused_input=False, warmup=3):
    """make_graphed_callables on the CPU: its warm-up (torch.autograd.grad on the sample,
    on every parameter), then one autograd node whose backward is torch.autograd.grad."""
    # make_graphed_callables fails (cudaErrorStreamCaptureImplicit) when an autograd node of
    # an earlier step is alive: training must have let go of every one
    assert not [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    params = tuple(p for p in module.parameters() if p.requires_grad)

    def grads(outputs, grad_outputs):
        return torch.autograd.grad(
            [o for o in outputs if o.requires_grad],
            params,
            grad_outputs=[g for o, g in zip(outputs, grad_outputs) if o.requires_grad],
            allow_unused=allow_unused_input,
        )

    for _ in range(warmup):
        outs = module(*sample_args)
        grads(outs, [torch.ones_like(o) if o.requires_grad else None for o in outs])

    class Node(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            with torch.enable_grad():
                outs = module(*inputs[: len(sample_args)])
            ctx.outs = outs
            return tuple(o.detach() for o in outs)

        @staticmethod
        def backward(ctx, *grad_outputs):
            g = grads(ctx.outs, grad_outputs)
            return (None,) * len(sample_args) + tuple(g)

    calls = []

    def graphed(*args):
        calls.append(tuple(a.shape for a in args))
        return Node.apply(*args, *params)

    graphed.calls = calls
    return graphed


@pytest.fixture
def graphed_on_cpu(monkeypatch):
    """Training takes the graphed path on the CPU: GraphedPieces with cpu_graph."""
    made = []

    def losses(model, cfg, device):
        if not cfg.cuda_graphs:
            return epoch.PieceLoss(model, cfg.aux_weight)
        g = model.__dict__.get("_graphed_pieces")
        if g is None:
            g = epoch.GraphedPieces(model, cfg.aux_weight, graph=cpu_graph)
            model.__dict__["_graphed_pieces"] = g
            made.append(g)
        return g

    monkeypatch.setattr(epoch, "piece_losses", losses)
    return made


def test_a_shape_is_graphed_the_second_time_it_comes_and_at_most_limit_shapes_are():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = model

        def forward(self, x, lengths, anchors):
            return self.lin(x.float().mean(1)), None

    captured = []

    def graph(module, args, allow_unused_input):
        captured.append(tuple(a.shape[0] for a in args))
        return module

    m = Model()
    g = epoch.GraphedPieces(m, 0.5, limit=2, graph=graph)

    def batch(n):
        return torch.randn(n, 4, 3), torch.full((n,), 4), torch.zeros(n, dtype=torch.int64)

    for n in (8, 8, 8, 5, 8, 7, 5, 7, 6, 6):
        g(*batch(n))
    # 8 at its 2nd time, 5 at its 2nd; 7 and 6 came twice but the limit (2) was reached
    assert captured == [(8, 8, 8), (5, 5, 5)]
    assert sorted(key[0][0][0] for key in g.graphs) == [5, 8]
    m.eval()  # evaluation never graphs
    g(*batch(9)), g(*batch(9))
    assert len(captured) == 2


def test_losses_on_a_cpu_are_eager_whatever_the_setting(tmp_path):
    data = write_images(tmp_path / "d")
    model = build_model(small_cfg(data), "continuous", 1, 3)
    for flag in (True, False):
        losses = epoch.piece_losses(model, small_cfg(data, cuda_graphs=flag), torch.device("cpu"))
        assert type(losses) is epoch.PieceLoss


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("images", {}),  # batches of 16 and a last one of 8: two graphs
        ("images", {"shared": 0.0}),  # the GRU baseline: no anchors, decoders unused
        ("images", {"decoder_input": "estimate"}),
        ("text", {"bucket": 2, "max_tokens": 100}),  # ragged, some batches in pieces
    ],
)
def test_training_through_the_graphed_path_is_the_eager_run_bit_for_bit(
    tmp_path, graphed_on_cpu, kind, extra
):
    if kind == "images":
        data = write_images(tmp_path / "data", sizes=(56, 16, 16))
        cfg = small_cfg(data, **extra)
    else:
        data = write_text(tmp_path / "data", sizes=(64, 16, 16))
        cfg = small_cfg(data, dataset="imdb", window=4, **extra)
    eager = fit(dataclasses.replace(cfg, cuda_graphs=False), tmp_path / "eager", log=quiet)
    assert graphed_on_cpu == []
    graphed = fit(cfg, tmp_path / "graphed", log=quiet)
    (pieces,) = graphed_on_cpu
    # the full batches' shape came back every epoch: it was graphed, and replayed
    assert pieces.graphs and all(len(g.calls) >= 2 for g in pieces.graphs.values())
    skip = {"config", "training_code"}
    assert {k: v for k, v in stable(graphed).items() if k not in skip} == {
        k: v for k, v in stable(eager).items() if k not in skip
    }
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]  # noqa: E731
    assert strip(read_history(tmp_path / "graphed")) == strip(read_history(tmp_path / "eager"))


def test_cuda_graphs_is_a_boolean_setting_a_run_may_change_and_resume():
    assert S.RunConfig().cuda_graphs is True
    a, b = S.RunConfig(cuda_graphs=True), S.RunConfig(cuda_graphs=False)
    assert config_differences(a.to_dict(), b) == []  # resume-exempt: the same numbers
    assert config_differences(dataclasses.replace(a, hidden=3).to_dict(), b) != []

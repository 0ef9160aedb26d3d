"""Many Binary Counter runs of one shape as one batched model: the second study's side of
fused training (psrnn.engine.group keeps each run's books).

    python -m psrnn train-group --config config/relreg.yaml --experiment proto_both

R runs whose settings differ only in FUSED_PER_RUN (psrnn.studies.relreg.settings: seed, learning
rate, the lambdas, the noise scale, the clip) share their data and their step structure,
so one process can step them together: every parameter becomes one tensor with a leading
run dimension (R, ...), named as in the run's own model (its state_dict keys), and the
equations of the four models are written once over it with batched matmuls
(psrnn.studies.relreg.lstm, proto, rmc and transformer hold the same equations for one run: the
Transformer's are torch.nn.TransformerEncoderLayer's, post-norm, ReLU, no dropout; the
RMC's attention is torch.nn.MultiheadAttention's, queries from the memory rows).
What stays per run is exactly what a run alone owns:

- its initial weights (each run's model is built alone, under its seed, then stacked);
- its data order (its own shuffle generator draws its permutation every epoch);
- its cell noise (eq. 3.5): a generator holding the global RNG state the run alone would
  have after building its model, drawing the same tensors in the same order;
- its loss (cross-entropy mean over its own batch), penalty (its own lambdas), gradient
  clip (the norm over its own parameters) and optimizer (Adam or SGD at its own learning
  rate, the formulas of torch.optim's single-tensor Adam and SGD; its state is kept in an
  OptimizerState, what the member's checkpoint holds, without a torch.optim object).

Each member's final evaluation (its best epoch on the validation and test bit counts) is
batched too (final_evaluations): the study's finish reads it instead of evaluating alone.

The sums over a batch are the same sums, but batched kernels add in another order than a
run's own, so a fused run's weights match the lone run's to float32 rounding, not bit for
bit: tests/test_fused.py checks that accuracies are identical and losses within 1e-4
over a few epochs. Over the thesis' 30 epochs that rounding grows in many RMC and
Transformer runs until they end in another model (LSTM and proto-LSTM runs stay put):
measured between two full-grid runs that differ in rounding only, results/relreg-full/RUN.md.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from psrnn.engine.checkpoint import Generators
from psrnn.engine.hooks import Batched as Members
from psrnn.studies.relreg import training as T
from psrnn.studies.relreg.base import VOCAB
from psrnn.studies.relreg.data import CounterSplit
from psrnn.studies.relreg.transformer import positions

CELL_NAMES = ("cell.weight_ih", "cell.weight_hh", "cell.bias")  # eq. 3.7's cell parameters
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults (training.make_optimizer)
EVAL_ELEMENTS = 1 << 22  # largest (runs x sequences x gate units) one evaluation step holds


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """Each run's nn.Linear: x (R, ..., I), w (R, O, I), b (R, O) or None -> (R, ..., O)."""
    R, I = x.shape[0], x.shape[-1]
    flat, wt = x.reshape(R, -1, I), w.transpose(1, 2)
    y = torch.bmm(flat, wt) if b is None else torch.baddbmm(b.unsqueeze(1), flat, wt)
    return y.view(*x.shape[:-1], -1)


def _norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Each run's nn.LayerNorm (eps 1e-5): x (R, ..., d), w and b (R, d)."""
    R, d = w.shape
    shape = (R, *[1] * (x.dim() - 2), d)
    return torch.addcmul(b.view(shape), F.layer_norm(x, (d,), eps=1e-5), w.view(shape))


def _grad(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None  # every parameter takes part in every forward
    return p.grad


class OptimizerState:
    """A member's optimizer as its checkpoint holds it: state_dict() and load_state_dict()
    in the form torch.optim.Adam (or SGD) at the run's learning rate gives and takes, so
    engine.fit resumes the checkpoint alone; the batched step (Batched.clip_and_step) is
    its own. Written by hand because a torch.optim optimizer imports torch._dynamo on first
    use (add_param_group, state_dict: 2.4 s per process on this CPU, a quarter of a 10-run
    group's job) for nothing here. The group's settings are the optimizer's own defaults,
    read from its signature (tests/test_fused.py checks both forms against torch.optim)."""

    def __init__(self, run: Any, model: nn.Module):
        kind = torch.optim.Adam if run.optimizer == "adam" else torch.optim.SGD
        skip = ("self", "params")
        self.group = {n: p.default for n, p in inspect.signature(kind).parameters.items() if n not in skip}
        self.group["lr"] = run.lr
        self.params = list(model.parameters())
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def state_dict(self) -> dict[str, Any]:
        index = {id(p): i for i, p in enumerate(self.params)}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items()},
            "param_groups": [{**self.group, "params": list(range(len(self.params)))}],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        groups = state["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError("the checkpoint's optimizer holds other parameters than the model's")
        self.state = {self.params[int(i)]: dict(s) for i, s in state["state"].items()}


def optimizer(run: Any, model: nn.Module) -> tuple[OptimizerState, None]:
    """A member's optimizer (psrnn.engine.group uses it in place of the study's): its state only."""
    return OptimizerState(run, model), None


def final_evaluations(runs: list[Any], models: list[nn.Module], data: T.Data) -> list[dict[str, Any]]:
    """Each run's model (its best epoch loaded) on the validation and test bit counts, as
    one batched model: {"valid": ..., "test": ...} per run, each as training.evaluate gives
    it (psrnn.studies.relreg.hooks.finish reads them)."""
    batch = Batched(runs, models)
    valid, test = batch.evaluate(data.valid), batch.evaluate(data.test)
    return [{"valid": v, "test": t} for v, t in zip(valid, test, strict=True)]


class Batched(Members):
    """The parameters and optimizer state of R runs of one shape, and their step (the
    engine's batched-members interface, psrnn.engine.hooks.Batched).

    params: state_dict key -> (R, *shape) leaf tensor; runs: the runs' settings; opts: their
    optimizers' states (OptimizerState or torch.optim's; None: no step is taken)."""

    def __init__(self, runs: list[Any], models: list[nn.Module], opts: list[Any] | None = None):
        self.runs, self.kind = runs, runs[0].model
        names = [n for n, _ in models[0].named_parameters()]
        self.params = {
            n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_()
            for n in names
        }
        self.adam = runs[0].optimizer == "adam"
        self.step_count, self.moments = 0, {}
        if self.adam and opts is not None:
            states = [o.state_dict()["state"] for o in opts]
            if states[0]:  # resumed: every member is at the same step (psrnn.engine.group's cohorts)
                self.step_count = int(states[0][0]["step"])
                self.moments = {
                    n: tuple(torch.stack([s[i][k] for s in states]) for k in ("exp_avg", "exp_avg_sq"))
                    for i, n in enumerate(names)
                }
        like = self.params[names[0]]
        self.noisy = [r.noise > 0 for r in runs]

        def per_run(field: str) -> torch.Tensor:
            return torch.tensor([float(getattr(r, field)) for r in runs], dtype=like.dtype)

        self.l2, self.l2_cell, self.l2_noncell = per_run("l2"), per_run("l2_cell"), per_run("l2_noncell")
        self.noise, self.clip = per_run("noise"), per_run("clip")

    def __len__(self) -> int:
        return len(self.runs)

    # --- the models ----------------------------------------------------------------------

    def forward(
        self, x: torch.Tensor, draws: list[tuple[torch.Tensor, ...]] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (R, B, T) tokens -> logits (R, B, T, 2), loading (R, B, T, K) or None; `draws`:
        per step, the cell noise (R, ...) of eq. 3.5 (training with noise only)."""
        if self.kind == "lstm":
            return self._lstm(x), None
        if self.kind == "transformer":
            return self._transformer(x), None
        if self.kind == "rmc":
            return self._rmc(x), None
        return self._proto(x, draws)

    def _head(self, hs: torch.Tensor) -> torch.Tensor:
        P = self.params
        R, B, T, H = hs.shape
        w, b = P["head.weight"], P["head.bias"]  # (R, 2, H), (R, 2)
        return torch.baddbmm(b.unsqueeze(1), hs.reshape(R, B * T, H), w.transpose(1, 2)).view(R, B, T, -1)

    def _lstm(self, x: torch.Tensor) -> torch.Tensor:
        P = self.params
        R, B, T = x.shape
        runs = torch.arange(R).view(R, 1, 1)
        # one-hot input times W_ih is the column of W_ih of the token: gather it
        xw = P["lstm.weight_ih_l0"].transpose(1, 2)[runs, x] + P["lstm.bias_ih_l0"].view(
            R, 1, 1, -1
        )  # (R, B, T, 4H)
        w_hh, b_hh = (
            P["lstm.weight_hh_l0"].transpose(1, 2),
            P["lstm.bias_hh_l0"].unsqueeze(1),
        )  # (R, H, 4H), (R, 1, 4H)
        H = w_hh.shape[1]
        h = c = xw.new_zeros(R, B, H)
        hs = []
        for t in range(T):
            gates = torch.baddbmm(b_hh, h, w_hh) + xw[:, :, t]  # (R, B, 4H), gates i, f, g, o
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        return self._head(torch.stack(hs, dim=2))

    def _proto(
        self, x: torch.Tensor, draws: list[tuple[torch.Tensor, ...]] | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        P = self.params
        R, B, T = x.shape
        w_ih, w_hh, bias = (P[n] for n in CELL_NAMES)  # (R, K, 4H, I), (R, K, 4H, H), (R, K, 4H)
        lw, lb = P["cell.loader.weight"], P["cell.loader.bias"]  # (R, K, I + H), (R, K)
        K, G, H = w_hh.shape[1], w_hh.shape[2], w_hh.shape[3]
        runs = torch.arange(R).view(R, 1)
        inputs = F.one_hot(x, VOCAB).to(w_ih.dtype)  # (R, B, T, I)
        if draws is not None:
            with torch.no_grad():  # sigma_w^k, sigma_b^k (eq. 3.5), per run and cell
                sigma_w = torch.cat([w_ih.reshape(R, K, -1), w_hh.reshape(R, K, -1)], dim=2).std(dim=2)
                sigma_b = bias.std(dim=2)  # (R, K)
            scale_w = self.noise.view(R, 1, 1, 1) * sigma_w.view(R, K, 1, 1)  # (R, K, 1, 1)
            scale_b = self.noise.view(R, 1, 1) * sigma_b.view(R, K, 1)
        h = c = inputs.new_zeros(R, B, H)
        hs, ps = [], []
        for t in range(T):
            a_ih, a_hh, b = w_ih, w_hh, bias
            if draws is not None:
                n_ih, n_hh, n_b = draws[t]
                a_ih, a_hh, b = w_ih + scale_w * n_ih, w_hh + scale_w * n_hh, bias + scale_b * n_b
            p = torch.softmax(
                torch.baddbmm(lb.unsqueeze(1), torch.cat([inputs[:, :, t], h], dim=2), lw.transpose(1, 2)),
                dim=2,
            )  # (R, B, K) eq. 3.3-3.4
            x_part = a_ih.permute(0, 3, 1, 2)[runs, x[:, :, t]]  # (R, B, K, 4H): W_ih^k of the token
            h_part = torch.bmm(h, a_hh.permute(0, 3, 1, 2).reshape(R, H, K * G)).view(R, B, K, G)
            per_cell = x_part + h_part + b.unsqueeze(1)  # (R, B, K, 4H)
            gates = torch.einsum("rbk,rbkg->rbg", p, per_cell)  # (R, B, 4H)
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # eq. 3.1
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
            ps.append(p)
        return self._head(torch.stack(hs, dim=2)), torch.stack(ps, dim=2)

    def _transformer(self, x: torch.Tensor) -> torch.Tensor:
        """psrnn.studies.relreg.transformer per run: embedding * sqrt(d) + positions, then each
        layer x = LN(x + SelfAttention(x)), x = LN(x + W2 relu(W1 x)); causal or not."""
        P, run0 = self.params, self.runs[0]
        R, B, T = x.shape
        emb = P["embed.weight"]  # (R, VOCAB, d)
        d, heads = emb.shape[2], run0.heads
        h = emb[torch.arange(R).view(R, 1, 1), x] * math.sqrt(d) + positions(T, d, emb)  # (R, B, T, d)
        for layer in range(run0.layers):
            pre = f"encoder.layers.{layer}."
            W = {n.removeprefix(pre): p for n, p in P.items() if n.startswith(pre)}  # this layer's
            qkv = _linear(h, W["self_attn.in_proj_weight"], W["self_attn.in_proj_bias"])  # (R, B, T, 3d)
            q, k, v = (z.reshape(R * B, T, heads, d // heads).transpose(1, 2) for z in qkv.chunk(3, dim=-1))
            # (R B, heads, T, d / heads) each; attention as nn.MultiheadAttention runs it in the layer
            att = F.scaled_dot_product_attention(q, k, v, is_causal=run0.causal).transpose(1, 2)
            att = _linear(
                att.reshape(R, B, T, d), W["self_attn.out_proj.weight"], W["self_attn.out_proj.bias"]
            )
            h = _norm(h + att, W["norm1.weight"], W["norm1.bias"])
            ff = torch.relu(_linear(h, W["linear1.weight"], W["linear1.bias"]))  # (R, B, T, hidden)
            ff = _linear(ff, W["linear2.weight"], W["linear2.bias"])  # (R, B, T, d)
            h = _norm(h + ff, W["norm2.weight"], W["norm2.bias"])
        return self._head(h)

    def _rmc(self, x: torch.Tensor) -> torch.Tensor:
        """psrnn.studies.relreg.rmc per run: each step the memory rows attend to themselves and the
        projected input, then residual + layer norm, the MLP, and the gated update."""
        P, run0 = self.params, self.runs[0]
        W = {n.removeprefix("core."): p for n, p in P.items() if n.startswith("core.")}
        R, B, T = x.shape
        d, heads, slots = run0.key_size * run0.heads, run0.heads, run0.slots
        inputs = F.one_hot(x, VOCAB).to(W["project.weight"].dtype)  # (R, B, T, VOCAB)
        w_q, w_kv = W["attend.in_proj_weight"].split([d, 2 * d], dim=1)  # (R, d, d), (R, 2d, d)
        b_q, b_kv = W["attend.in_proj_bias"].split([d, 2 * d], dim=1)
        memory = torch.eye(slots, d, dtype=inputs.dtype).expand(R, B, slots, d)  # (R, B, N, d)
        # every step's projected input and its part of the gates at once: (R, B, T, d), (R, B, T, 2d)
        xps = _linear(inputs, W["project.weight"], W["project.bias"])
        gate_x = _linear(xps, W["gate_input.weight"], W["gate_input.bias"])
        outs = []
        for t in range(T):
            xp = xps[:, :, t].unsqueeze(2)  # (R, B, 1, d)
            both = torch.cat([memory, xp], dim=2)  # (R, B, N + 1, d)
            q = _linear(memory, w_q, b_q).reshape(R * B, slots, heads, d // heads).transpose(1, 2)
            k, v = (
                z.reshape(R * B, slots + 1, heads, d // heads).transpose(1, 2)
                for z in _linear(both, w_kv, b_kv).chunk(2, dim=-1)
            )  # (R B, heads, N + 1, d / heads) each
            # softmax(q k^T / sqrt(d_head)) v written out: F.scaled_dot_product_attention's
            # own (equal to float rounding) costs twice as much at these few-row shapes
            w = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (d // heads) ** -0.5, dim=-1)
            att = torch.matmul(w, v).transpose(1, 2).reshape(R, B, slots, d)
            att = _linear(att, W["attend.out_proj.weight"], W["attend.out_proj.bias"])  # (R, B, N, d)
            m = _norm(memory + att, W["norm_attend.weight"], W["norm_attend.bias"])
            mlp = _linear(
                torch.relu(_linear(m, W["mlp.0.weight"], W["mlp.0.bias"])), W["mlp.2.weight"], W["mlp.2.bias"]
            )
            m = _norm(m + mlp, W["norm_mlp.weight"], W["norm_mlp.bias"])  # (R, B, N, d) the candidate
            gates = gate_x[:, :, t].unsqueeze(2) + _linear(
                torch.tanh(memory), W["gate_memory.weight"], None
            )  # (R, B, N, 2d)
            i, f = gates.chunk(2, dim=-1)
            i, f = torch.sigmoid(i), torch.sigmoid(f + 1.0)  # input bias 0, forget bias 1
            memory = i * torch.tanh(m) + f * memory
            outs.append(memory.flatten(2))  # (R, B, N d)
        return self._head(torch.stack(outs, dim=2))

    def noise_draws(self, gens: list[torch.Generator], steps: int) -> list[tuple[torch.Tensor, ...]] | None:
        """Each noisy run's cell noise for one forward of `steps` steps, drawn from its own
        generator in the order the run alone draws it (per step: W_ih, W_hh, b); zeros for
        runs without noise (their scale is 0). None: no run has noise."""
        if self.kind != "proto" or not any(self.noisy):
            return None
        shapes = [tuple(self.params[n].shape[1:]) for n in CELL_NAMES]
        like = self.params[CELL_NAMES[0]]
        out = [[like.new_zeros(len(self), *s) for s in shapes] for _ in range(steps)]
        for r, gen in enumerate(gens):
            if self.noisy[r]:
                for t in range(steps):
                    for j, s in enumerate(shapes):
                        out[t][j][r] = torch.randn(s, generator=gen)
        return [tuple(d) for d in out]

    # --- one step --------------------------------------------------------------------------

    def penalty(self) -> torch.Tensor:
        """(R,): l2 * eq. 3.6 + eq. 3.7 per run (psrnn.studies.relreg.regularizers)."""
        squares = {n: p.pow(2).flatten(1).sum(dim=1) for n, p in self.params.items()}  # (R,) each
        cell = sum((s for n, s in squares.items() if n in CELL_NAMES), torch.zeros(len(self)))
        other = sum((s for n, s in squares.items() if n not in CELL_NAMES), torch.zeros(len(self)))
        return self.l2_cell * cell + self.l2_noncell * other + self.l2 * (cell + other)

    def clip_and_step(self, lrs: torch.Tensor) -> None:
        """Clip each run's gradient to its own global norm (clip 0: none), then one Adam or
        SGD step per run at its learning rate `lrs` (R,). Over all parameters at once with
        torch's foreach ops (each a loop in C++ over the tensors: a step is ~10 calls, not
        10 per parameter)."""
        with torch.no_grad():
            R, ps = len(self), list(self.params.values())
            grads = [_grad(p) for p in ps]
            total = torch.cat([g.reshape(R, -1) for g in grads], dim=1).norm(dim=1)  # (R,): clip_grad_norm_'s
            coef = torch.clamp(self.clip / (total + 1e-6), max=1.0)
            coef = torch.where(self.clip > 0, coef, torch.ones_like(coef))
            lr = lrs.to(coef.dtype)
            gs = torch._foreach_mul(grads, [coef.view(-1, *[1] * (p.dim() - 1)) for p in ps])
            lr_cols = [lr.view(-1, *[1] * (p.dim() - 1)) for p in ps]
            self.step_count += 1
            if not self.adam:
                torch._foreach_mul_(gs, lr_cols)
                torch._foreach_sub_(ps, gs)
                return
            if not self.moments:
                self.moments = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in self.params.items()}
            ms, vs = [self.moments[n][0] for n in self.params], [self.moments[n][1] for n in self.params]
            b1, b2 = ADAM_BETAS
            torch._foreach_lerp_(ms, gs, 1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
            bc1, bc2 = 1 - b1**self.step_count, 1 - b2**self.step_count
            denom = torch._foreach_sqrt(vs)
            torch._foreach_div_(denom, math.sqrt(bc2))
            torch._foreach_add_(denom, ADAM_EPS)
            update = torch._foreach_div(ms, denom)
            torch._foreach_mul_(update, lr_cols)
            torch._foreach_add_(ps, update, alpha=-1.0 / bc1)

    def train_epoch(
        self, data: T.Data, epoch: int, gens: list[Generators], rngs: list[torch.Generator]
    ) -> dict[str, torch.Tensor]:
        """One pass over the training sequences, each run in its own random batches (its
        shuffle generator), its cell noise from its own RNG (`rngs`): the history's training
        columns, (R,) float64 each: `train_loss` (mean bit loss) and `train_penalty` (mean
        penalty); NaN for a run whose loss was not finite (its weights are then garbage: the
        engine drops it)."""
        lrs = torch.tensor([r.lr for r in self.runs], dtype=torch.float64)
        batch_size = self.runs[0].batch_size  # one of the group key's settings
        order = torch.stack([torch.randperm(len(data.train), generator=g.shuffle) for g in gens])  # (R, N)
        loss_sum = torch.zeros(len(self), dtype=torch.float64)
        pen_sum = torch.zeros(len(self), dtype=torch.float64)
        bad = torch.zeros(len(self), dtype=torch.bool)
        steps = 0
        for i in range(0, order.shape[1], batch_size):
            idx = order[:, i : i + batch_size]  # (R, b)
            x, y = data.train.x[idx], data.train.y[idx]  # (R, b, k + 1), (R, b, k)
            logits, _ = self.forward(x, self.noise_draws(rngs, x.shape[2]))
            logits = logits[:, :, 1:]  # step 0 reads the start token
            loss = F.cross_entropy(logits.reshape(-1, 2), y.reshape(-1), reduction="none")
            loss = loss.view(len(self), -1).mean(dim=1)  # (R,)
            pen = self.penalty()
            total = loss + pen
            bad |= ~torch.isfinite(total)
            for p in self.params.values():
                p.grad = None
            torch.where(bad, torch.zeros_like(total), total).sum().backward()
            self.clip_and_step(lrs)
            loss_sum += loss.detach().double()
            pen_sum += pen.detach().double()
            steps += 1
        nan = torch.full_like(loss_sum, math.nan)
        return {
            "train_loss": torch.where(bad, nan, loss_sum / steps),
            "train_penalty": torch.where(bad, nan, pen_sum / steps),
        }

    def validate(self, data: T.Data) -> list[dict[str, Any]]:
        """Every run on the validation bit counts (evaluate)."""
        return self.evaluate(data.valid)

    @torch.no_grad()
    def evaluate(self, splits: list[CounterSplit]) -> list[dict[str, Any]]:
        """training.evaluate for every run (the same numbers, per run, in the same form)."""
        R = len(self)
        width = self._width()
        batch = max(1, min(1024, EVAL_ELEMENTS // (R * width)))
        loss_sum = torch.zeros(R, dtype=torch.float64)
        seq_right, bit_right = torch.zeros(R), torch.zeros(R)
        seqs = bits_total = 0
        per_bits: list[dict[str, dict[str, float]]] = [{} for _ in range(R)]
        loading: list[list[torch.Tensor]] = [[] for _ in range(R)]
        for sp in splits:
            s_right, b_right = torch.zeros(R), torch.zeros(R)
            for i in range(0, len(sp), batch):
                x, y = sp.x[i : i + batch], sp.y[i : i + batch]
                logits, p = self.forward(x.expand(R, *x.shape))
                logits = logits[:, :, 1:]  # (R, B, k, 2)
                ce = F.cross_entropy(
                    logits.reshape(-1, 2), y.expand(R, *y.shape).reshape(-1), reduction="none"
                )
                loss_sum += ce.view(R, -1).sum(dim=1).double()
                right = logits.argmax(-1) == y  # (R, B, k)
                s_right += right.all(dim=2).sum(dim=1)
                b_right += right.sum(dim=(1, 2))
                if p is not None:
                    for r in range(R):
                        loading[r].append(p[r].reshape(-1))
            n = len(sp)
            for r in range(R):
                sr, br = float(s_right[r]), float(b_right[r])
                per_bits[r][str(sp.bits)] = {"seq_acc": sr / n, "bit_acc": br / (n * sp.bits), "count": n}
            seqs += n
            bits_total += n * sp.bits
            seq_right += s_right
            bit_right += b_right
        return [
            {
                "loss": float(loss_sum[r]) / bits_total,
                "seq_acc": float(seq_right[r]) / seqs,
                "bit_acc": float(bit_right[r]) / bits_total,
                "per_bits": per_bits[r],
                "loading": torch.cat(loading[r]) if loading[r] else None,
            }
            for r in range(R)
        ]

    def _width(self) -> int:
        """Activations per sequence and step of one run (gate units; the Transformer's
        projections and feed-forward units per layer): sizes the evaluation batches."""
        d = self.params["head.weight"].shape[2]
        if self.kind == "transformer":
            return self.runs[0].layers * (4 * d + self.runs[0].hidden)
        cells = self.params["cell.bias"].shape[1] if self.kind == "proto" else 1
        return cells * 4 * d

    # --- to and from the runs' own models ------------------------------------------------

    @torch.no_grad()
    def write_back(self, r: int, model: nn.Module, opt: Any) -> None:
        """Run r's weights into its own model and its optimizer state into its own optimizer,
        as torch.optim would hold them after as many steps (its ckpt_last.pt resumes alone)."""
        params = dict(model.named_parameters())
        for n, p in self.params.items():
            params[n].copy_(p[r])
        if self.adam and self.step_count:
            for n, p in params.items():
                m, v = self.moments[n]
                opt.state[p] = {
                    "step": torch.tensor(float(self.step_count)),
                    "exp_avg": m[r].clone(),
                    "exp_avg_sq": v[r].clone(),
                }

    def keep(self, rows: list[int]) -> None:
        """Go on with runs `rows` only (the others stopped or failed)."""
        index = torch.tensor(rows, dtype=torch.long)
        self.runs = [self.runs[r] for r in rows]
        self.noisy = [self.noisy[r] for r in rows]
        self.params = {n: p.detach()[index].clone().requires_grad_() for n, p in self.params.items()}
        self.moments = {n: (m[index].clone(), v[index].clone()) for n, (m, v) in self.moments.items()}
        for name in ("l2", "l2_cell", "l2_noncell", "noise", "clip"):
            setattr(self, name, getattr(self, name)[index])

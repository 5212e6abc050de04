"""A small tanh multilayer perceptron with analytic input derivatives up to third order.

Used for the learned minimal-coordinate map g_n(q_m) of paper 004 (sec. 3.4, 5.2): a few
tanh layers and a final linear layer, whose value *and* first, second and third
derivatives with respect to its input are needed by the ADE-KF (eqs. 34-49).

Jets. Everything propagates "jets": for an input z (g,) and a layer quantity v (u,), the
jet of order K is the list [v, dv/dz, d2v/dz2, d3v/dz3][:K+1] with shapes (N, u),
(N, u, g), (N, u, g, g), (N, u, g, g, g) for a batch of N inputs. The features
(:class:`Features`) turn z into a jet; affine layers act linearly on every order; a tanh
layer with a = pre-activation jet, t = tanh(a0) and s_k = d^k tanh / da^k,

    s1 = 1 - t^2,   s2 = -2 t s1,   s3 = -2 (s1^2 + t s2),   s4 = -2 (3 s1 s2 + t s3),

gives (Faa di Bruno, symmetric tensors)::

    out0 = t
    out1 = s1 a1
    out2 = s2 a1 a1 + s1 a2
    out3 = s3 a1 a1 a1 + s2 (a2_ij a1_k + a2_ik a1_j + a2_jk a1_i) + s1 a3

Training. The loss is a weighted sum over orders k of mean squared errors of the jet
against targets (values and derivatives from the engine), each normalised by the mean
square of its target. Its gradient with respect to the weights is the exact reverse-mode
derivative of the jet computation above (hand-written backward pass; a finite-difference
check is in the tests), minimised by L-BFGS (:func:`mbde_core.learn.fit.fit`). Initialisation
is Glorot-uniform from a seeded numpy Generator, so a training run is reproducible.

Features. Angle inputs enter through (sin z, cos z), so the network is 2 pi-periodic in
them (paper 004 sec. 5.2, "periodic neural network"); other inputs through
(z - center) / half_width.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_ORDER = 3


# ------------------------------------------------------------------------------------------
# features
# ------------------------------------------------------------------------------------------
@dataclass
class Features:
    """Input features of z (g,): (sin, cos) of angle inputs, scaled values of the others.

    angle: (g,) bool; center, half_width: (g,) for the non-angle inputs (ignored for angles).
    The feature vector has p = g + (number of angles) entries.
    """

    angle: np.ndarray
    center: np.ndarray
    half_width: np.ndarray

    @property
    def g(self) -> int:
        return int(self.angle.size)

    @property
    def p(self) -> int:
        return int(self.angle.size + np.count_nonzero(self.angle))

    def jet(self, z: np.ndarray, order: int) -> list[np.ndarray]:
        """Feature jet of z (N, g): [phi (N, p), dphi (N, p, g), ...][: order + 1]."""
        z = np.asarray(z, dtype=float)
        N, g = z.shape
        out = [np.zeros((N, self.p) + (g,) * k) for k in range(order + 1)]
        f = 0
        for i in range(g):
            if self.angle[i]:
                s, c = np.sin(z[:, i]), np.cos(z[:, i])
                # d^k sin = (s, c, -s, -c), d^k cos = (c, -s, -c, s)
                seq_s, seq_c = (s, c, -s, -c), (c, -s, -c, s)
                for k in range(order + 1):
                    idx = (slice(None), f) + (i,) * k
                    out[k][idx] = seq_s[k]
                    out[k][(slice(None), f + 1) + (i,) * k] = seq_c[k]
                f += 2
            else:
                w = self.half_width[i]
                out[0][:, f] = (z[:, i] - self.center[i]) / w
                if order >= 1:
                    out[1][:, f, i] = 1.0 / w
                f += 1
        return out


# ------------------------------------------------------------------------------------------
# jet algebra
# ------------------------------------------------------------------------------------------
def _bc(s: np.ndarray, k: int) -> np.ndarray:
    """Broadcast (N, u) to (N, u, 1, ..., 1) with k trailing axes."""
    return s.reshape(s.shape + (1,) * k)


def _affine(W, b, jet):
    out = [jet[0] @ W.T + b]
    for k in range(1, len(jet)):
        out.append(np.einsum("ij,nj...->ni...", W, jet[k]))
    return out


def _tanh_derivatives(a0, order):
    t = np.tanh(a0)
    s = [t, 1.0 - t * t]
    s.append(-2.0 * t * s[1])
    s.append(-2.0 * (s[1] * s[1] + t * s[2]))
    s.append(-2.0 * (3.0 * s[1] * s[2] + t * s[3]))
    return s[: order + 2]


def _tanh_forward(a, s):
    order = len(a) - 1
    out = [s[0]]
    if order >= 1:
        a1 = a[1]
        out.append(_bc(s[1], 1) * a1)
    if order >= 2:
        a2 = a[2]
        a11 = a1[..., :, None] * a1[..., None, :]
        out.append(_bc(s[2], 2) * a11 + _bc(s[1], 2) * a2)
    if order >= 3:
        a3 = a[3]
        a111 = a11[..., None] * a1[..., None, None, :]
        sym = (a2[..., :, :, None] * a1[..., None, None, :] + a2[..., :, None, :] * a1[..., None, :, None]
               + a2[..., None, :, :] * a1[..., :, None, None])
        out.append(_bc(s[3], 3) * a111 + _bc(s[2], 3) * sym + _bc(s[1], 3) * a3)
    return out


def _sum_g(x, k):
    """Sum over the k trailing derivative axes."""
    return x.sum(axis=tuple(range(-k, 0))) if k else x


def _tanh_backward(a, s, G):
    """Gradients w.r.t. the pre-activation jet a, given symmetric gradients G of the output jet."""
    order = len(a) - 1
    gA = [G[0] * s[1]]
    gs = [None, 0.0, 0.0, 0.0]
    if order >= 1:
        a1 = a[1]
        gs[1] = gs[1] + _sum_g(G[1] * a1, 1)
        gA.append(_bc(s[1], 1) * G[1])
    if order >= 2:
        a2 = a[2]
        a11 = a1[..., :, None] * a1[..., None, :]
        gs[2] = gs[2] + _sum_g(G[2] * a11, 2)
        gs[1] = gs[1] + _sum_g(G[2] * a2, 2)
        gA[1] = gA[1] + 2.0 * _bc(s[2], 1) * np.einsum("...ij,...j->...i", G[2], a1)
        gA.append(_bc(s[1], 2) * G[2])
    if order >= 3:
        a3 = a[3]
        G3 = G[3]
        gs[3] = gs[3] + _sum_g(G3 * (a11[..., None] * a1[..., None, None, :]), 3)
        gs[2] = gs[2] + 3.0 * _sum_g(G3 * (a2[..., :, :, None] * a1[..., None, None, :]), 3)
        gs[1] = gs[1] + _sum_g(G3 * a3, 3)
        gA[1] = gA[1] + 3.0 * _bc(s[3], 1) * np.einsum("...ijk,...j,...k->...i", G3, a1, a1) \
            + 3.0 * _bc(s[2], 1) * np.einsum("...ijk,...jk->...i", G3, a2)
        gA[2] = gA[2] + 3.0 * _bc(s[2], 2) * np.einsum("...ijk,...k->...ij", G3, a1)
        gA.append(_bc(s[1], 3) * G3)
    for k in range(1, order + 1):
        gA[0] = gA[0] + gs[k] * s[k + 1]
    return gA


# ------------------------------------------------------------------------------------------
# the network
# ------------------------------------------------------------------------------------------
class TanhMLP:
    """y = W_L tanh(... tanh(W_1 phi + b_1) ...) + b_L with analytic input jets.

    weights: list of (W (out, in), b (out,)) per layer; every layer but the last is
    followed by tanh.
    """

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]]):
        self.weights = [(np.asarray(W, dtype=float), np.asarray(b, dtype=float)) for W, b in weights]

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def initial(sizes: list[int], rng: np.random.Generator) -> "TanhMLP":
        """Glorot-uniform weights, zero biases; sizes = [inputs, hidden..., outputs]."""
        ws = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            lim = np.sqrt(6.0 / (fan_in + fan_out))
            ws.append((rng.uniform(-lim, lim, (fan_out, fan_in)), np.zeros(fan_out)))
        return TanhMLP(ws)

    @property
    def sizes(self) -> list[int]:
        return [self.weights[0][0].shape[1]] + [W.shape[0] for W, _ in self.weights]

    def vector(self) -> np.ndarray:
        """All parameters as one vector (layer by layer, W row-major then b)."""
        return np.concatenate([np.concatenate([W.ravel(), b]) for W, b in self.weights])

    def with_vector(self, theta: np.ndarray) -> "TanhMLP":
        out, k = [], 0
        for W, b in self.weights:
            nW = W.size
            out.append((theta[k : k + nW].reshape(W.shape), theta[k + nW : k + nW + b.size]))
            k += nW + b.size
        return TanhMLP(out)

    @property
    def n_params(self) -> int:
        return sum(W.size + b.size for W, b in self.weights)

    # -- evaluation --------------------------------------------------------------------------
    def jet(self, phi_jet: list[np.ndarray]) -> list[np.ndarray]:
        """Output jet [y (N, o), dy (N, o, g), ...] from the feature jet (same order)."""
        if len(phi_jet) > 1 and phi_jet[1].shape[-1] == 1:  # one input: scalar-derivative fast path
            Y = self._jet1(_stack1(phi_jet))
            return _unstack1(Y)
        h = phi_jet
        last = len(self.weights) - 1
        for li, (W, b) in enumerate(self.weights):
            a = _affine(W, b, h)
            if li == last:
                return a
            h = _tanh_forward(a, _tanh_derivatives(a[0], len(a) - 1))
        return h  # pragma: no cover

    def loss_and_gradient(self, phi_jet, targets, weights) -> tuple[float, np.ndarray]:
        """Weighted normalised squared error of the output jet and its parameter gradient.

        targets: list like the output jet (orders 0..K); weights: (K+1,) per-order weights
        already divided by the mean square of each target (and by the entry counts).
        """
        if len(phi_jet) > 1 and phi_jet[1].shape[-1] == 1:
            return self._loss1(_stack1(phi_jet), _stack1(targets), np.asarray(weights, dtype=float))
        # forward with a tape
        tape = []
        h = phi_jet
        last = len(self.weights) - 1
        for li, (W, b) in enumerate(self.weights):
            a = _affine(W, b, h)
            if li == last:
                tape.append((h, None, None))
                y = a
                break
            s = _tanh_derivatives(a[0], len(a) - 1)
            tape.append((h, a, s))
            h = _tanh_forward(a, s)
        loss = 0.0
        G = []
        for k, (yk, tk) in enumerate(zip(y, targets)):
            r = yk - tk
            loss += weights[k] * float(np.sum(r * r))
            G.append(2.0 * weights[k] * r)
        # backward
        grads = [None] * len(self.weights)
        for li in range(last, -1, -1):
            W, b = self.weights[li]
            h_in, a, s = tape[li]
            if li < last:
                G = _tanh_backward(a, s, G)
            gW = sum(np.einsum("nir,njr->ij", Gk.reshape(Gk.shape[0], Gk.shape[1], -1),
                               hk.reshape(hk.shape[0], hk.shape[1], -1)) for Gk, hk in zip(G, h_in))
            gb = G[0].sum(axis=0)
            grads[li] = (gW, gb)
            if li > 0:
                G = [np.einsum("ij,ni...->nj...", W, Gk) for Gk in G]
        return loss, np.concatenate([np.concatenate([gW.ravel(), gb]) for gW, gb in grads])


    # -- one input (g = 1): jets as stacked arrays (K+1, N, u) of plain derivatives ------------
    def _jet1(self, X):
        last = len(self.weights) - 1
        for li, (W, b) in enumerate(self.weights):
            A = X @ W.T
            A[0] += b
            if li == last:
                return A
            X = _tanh1_forward(A, _tanh_derivatives(A[0], A.shape[0] - 1))
        return X  # pragma: no cover

    def _loss1(self, X, T, weights):
        tape = []
        last = len(self.weights) - 1
        for li, (W, b) in enumerate(self.weights):
            A = X @ W.T
            A[0] += b
            if li == last:
                tape.append((X, None, None))
                break
            s = _tanh_derivatives(A[0], A.shape[0] - 1)
            tape.append((X, A, s))
            X = _tanh1_forward(A, s)
        R = A - T
        w = weights.reshape(-1, 1, 1)
        loss = float(np.sum(w * R * R))
        G = 2.0 * w * R
        grads = [None] * len(self.weights)
        for li in range(last, -1, -1):
            W, b = self.weights[li]
            Xin, A, s = tape[li]
            if li < last:
                G = _tanh1_backward(A, s, G)
            K1, N = G.shape[0], G.shape[1]
            gW = G.reshape(K1 * N, -1).T @ Xin.reshape(K1 * N, -1)
            grads[li] = (gW, G[0].sum(axis=0))
            if li > 0:
                G = G @ W
        return loss, np.concatenate([np.concatenate([gW.ravel(), gb]) for gW, gb in grads])


def _stack1(jet):
    """[(N, u), (N, u, 1), (N, u, 1, 1), ...] -> (K+1, N, u)."""
    return np.stack([a.reshape(a.shape[0], a.shape[1]) for a in jet])


def _unstack1(X):
    return [X[k].reshape(X.shape[1], X.shape[2], *([1] * k)) for k in range(X.shape[0])]


def _tanh1_forward(A, s):
    K = A.shape[0] - 1
    out = np.empty_like(A)
    out[0] = s[0]
    if K >= 1:
        a1 = A[1]
        out[1] = s[1] * a1
    if K >= 2:
        a2 = A[2]
        out[2] = s[2] * a1 * a1 + s[1] * a2
    if K >= 3:
        out[3] = s[3] * a1 * a1 * a1 + 3.0 * s[2] * a2 * a1 + s[1] * A[3]
    return out


def _tanh1_backward(A, s, G):
    """_tanh_backward for one input (scalar derivatives)."""
    K = A.shape[0] - 1
    gA = np.empty_like(G)
    gA[0] = G[0] * s[1]
    if K >= 1:
        a1 = A[1]
        gs1 = G[1] * a1
        gA[1] = s[1] * G[1]
    if K >= 2:
        a2 = A[2]
        gs2 = G[2] * a1 * a1
        gs1 = gs1 + G[2] * a2
        gA[1] += 2.0 * s[2] * G[2] * a1
        gA[2] = s[1] * G[2]
    if K >= 3:
        G3 = G[3]
        gs3 = G3 * a1 * a1 * a1
        gs2 = gs2 + 3.0 * G3 * a2 * a1
        gs1 = gs1 + G3 * A[3]
        gA[1] += 3.0 * s[3] * G3 * a1 * a1 + 3.0 * s[2] * G3 * a2
        gA[2] += 3.0 * s[2] * G3 * a1
        gA[3] = s[1] * G3
        gA[0] += gs3 * s[4]
    if K >= 2:
        gA[0] += gs2 * s[3]
    if K >= 1:
        gA[0] += gs1 * s[2]
    return gA

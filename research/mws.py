"""mws.py -- memoised wake-sleep (Hewitt et al., seed 001) on the noisy 1-D cellular automata of
its Sec. 4.3 and supplement 7.6: the CA renderer (neighbourhood D = 3, the elementary automata,
or D = 5), the generative model p(rule) p(image | rule, first row, epsilon) with its exact
likelihood and exact posterior, the recognition CNN r(rule | image), the top-K memory Q_i, and
the training steps of MWS (Mem-r, Sleep-r) and RWS (Sleep-r, Wake-r)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NEIGHBOURHOODS = (1, 3, 5)  # odd sizes D whose 2^D-bit rules fit a long (D = 5: 32 bits); 3 is Sec. 4.3


def n_patterns(D):
    """2^D neighbourhood patterns (a rule is one output bit per pattern); ValueError unless D is
    one of NEIGHBOURHOODS."""
    if D not in NEIGHBOURHOODS:
        raise ValueError("neighbourhood D must be one of %s, got %r" % (NEIGHBOURHOODS, D))
    return 2 ** D


# ---------------------------------------------------------------- rules and the renderer

def rule_bits(rules, D=3):
    """Rule numbers (Wolfram's numbering: bit b of the rule is the next cell's value for the
    neighbourhood pattern b, whose leftmost cell is its highest bit: b = 4 left + 2 centre + right
    for D = 3) to float bits, shape rules.shape + (2^D,). Rules must lie in 0..2^(2^D) - 1
    (values outside give the bits of their low 2^D bits)."""
    return ((rules.long()[..., None] >> torch.arange(n_patterns(D))) & 1).double()


def bits_rule(bits):
    """Bits (..., 2^D) of 0/1 values back to rule numbers (...), long."""
    return (bits.round().long() * 2 ** torch.arange(bits.shape[-1])).sum(-1)


def patterns(rows, D=3):
    """Neighbourhood pattern of every cell of the next row, from rows (..., W) of 0/1 values with
    periodic boundaries: sum over the offsets o = -(D-1)/2 .. (D-1)/2 of 2^((D-1)/2 - o) x[j+o]
    (D = 3: 4 x[j-1] + 2 x[j] + x[j+1]), long, same shape as rows."""
    n_patterns(D)
    r = rows.long()
    h = D // 2
    out = torch.zeros_like(r)
    for o in range(-h, h + 1):
        out += (1 << (h - o)) * torch.roll(r, -o, dims=-1)
    return out


def ca_render(rules, first_rows, height, eps, generator=None, D=3):
    """Images (B, height, W) of 0/1 doubles drawn from the noisy automaton of Sec. 4.3: row 0 is
    first_rows (B, W); each later cell is rule[pattern of the D cells above] flipped with
    probability eps (the noise enters the row the next row is read from). rules: (B,) long in
    0..2^(2^D) - 1; eps in [0, 1] (a float or a 0-d tensor); generator: the torch.Generator of
    every flip (needed only when eps > 0). Raises ValueError on a height < 1, mismatched shapes
    or a D outside NEIGHBOURHOODS."""
    if height < 1:
        raise ValueError("height must be at least 1")
    if first_rows.dim() != 2 or rules.shape != first_rows.shape[:1]:
        raise ValueError("rules must be (B,) and first_rows (B, W)")
    bits = rule_bits(rules, D)
    B, W = first_rows.shape
    img = torch.empty(B, height, W, dtype=torch.float64)
    img[:, 0] = first_rows.double()
    eps = float(eps)
    for i in range(1, height):
        nxt = torch.gather(bits, 1, patterns(img[:, i - 1], D))
        if eps > 0:
            flip = torch.rand(B, W, generator=generator, dtype=torch.float64) < eps
            nxt = torch.where(flip, 1.0 - nxt, nxt)
        img[:, i] = nxt
    return img


def pattern_counts(images, D=3):
    """Sufficient statistics of images (B, H, W) of 0/1 values for the likelihood: counts
    (B, 2^D, 2) of cells in rows 1..H-1 whose pattern above is b and whose value is v."""
    B, H, W = images.shape
    npat = n_patterns(D)
    pat = patterns(images[:, :-1], D).reshape(B, -1)
    val = images[:, 1:].round().long().reshape(B, -1)
    idx = pat * 2 + val
    counts = torch.zeros(B, npat * 2, dtype=torch.float64)
    counts.scatter_add_(1, idx, torch.ones_like(idx, dtype=torch.float64))
    return counts.reshape(B, npat, 2)


def log_lik_counts(counts, bits, log_eps, log_1m_eps, width):
    """Exact log p(image | rule, eps) from the image's counts (B, 2^D, 2) and rule bits
    (B, M, 2^D): every cell below row 0 agrees with its rule's bit with probability 1 - eps, and
    row 0 is uniform (-width log 2). Returns (B, M); log_eps / log_1m_eps may carry gradients.
    It is linear in the bits, so bits may also be probabilities: the expectation over
    independent bits (posterior_bits)."""
    c0 = counts[:, None, :, 0]
    c1 = counts[:, None, :, 1]
    match = (c1 * bits + c0 * (1.0 - bits)).sum(-1)
    total = counts.sum((1, 2))[:, None]
    return match * log_1m_eps + (total - match) * log_eps - width * math.log(2.0)


# ---------------------------------------------------------------- the generative model

class CAModel(nn.Module):
    """p_theta(z, x) = p(z) p(x | z, eps): a factorised Bernoulli prior over the 2^D rule bits
    (logits `prior_logits`) and the flip noise eps = sigmoid(eps_logit), both learned. Raises
    ValueError on eps0 outside (0, 1) or a D outside NEIGHBOURHOODS."""

    def __init__(self, eps0=0.1, width=64, height=64, D=3):
        super().__init__()
        if not 0.0 < eps0 < 1.0:
            raise ValueError("eps0 must lie in (0, 1)")
        self.eps_logit = nn.Parameter(torch.tensor(math.log(eps0 / (1.0 - eps0)), dtype=torch.float64))
        self.prior_logits = nn.Parameter(torch.zeros(n_patterns(D), dtype=torch.float64))
        self.width = width
        self.height = height
        self.D = D

    def eps(self):
        """The current flip probability (0-d tensor, with gradient)."""
        return torch.sigmoid(self.eps_logit)

    def log_prior(self, bits):
        """log p(z) for rule bits (..., 2^D); same leading shape."""
        return (bits * F.logsigmoid(self.prior_logits) + (1.0 - bits) * F.logsigmoid(-self.prior_logits)).sum(-1)

    def log_joint(self, counts, bits):
        """log p(z, x) for images given by their counts (B, 2^D, 2) and rules bits (B, M, 2^D):
        (B, M). Linear in the bits, like log_lik_counts."""
        ll = log_lik_counts(counts, bits, F.logsigmoid(self.eps_logit), F.logsigmoid(-self.eps_logit), self.width)
        return ll + self.log_prior(bits)

    def posterior_bits(self, counts):
        """The exact posterior p(z | x) of images given by their counts (B, 2^D, 2), as
        P(z_b = 1 | x) (B, 2^D): prior and likelihood both factorise over the rule's bits, so the
        posterior over the 2^(2^D) rules is a product of independent Bernoullis, logit
        prior_logit_b + (c_b1 - c_b0) (log(1 - eps) - log eps). Used by the exact-posterior
        reference and the evaluation only, never by MWS or RWS."""
        gap = F.logsigmoid(-self.eps_logit) - F.logsigmoid(self.eps_logit)
        return torch.sigmoid(self.prior_logits + (counts[..., 1] - counts[..., 0]) * gap)

    @torch.no_grad()
    def sample(self, n, generator):
        """Draws n pairs (rules (n,), images (n, height, width)) from p_theta (the sleep phase)."""
        p = torch.sigmoid(self.prior_logits)
        bits = (torch.rand(n, p.shape[0], generator=generator, dtype=torch.float64) < p).double()
        rules = bits_rule(bits)
        first = (torch.rand(n, self.width, generator=generator) < 0.5).double()
        return rules, ca_render(rules, first, self.height, self.eps().item(), generator, self.D)


# ---------------------------------------------------------------- the recognition network

class RecogNet(nn.Module):
    """r(z | x): a 4-layer CNN with batch normalisation (seed 001, supplement 7.6) and 2^D
    independent Bernoulli outputs. Batch statistics are always used (no running averages), so
    real and dreamt batches are each normalised by their own statistics."""

    def __init__(self, channels=(16, 16, 32, 32), first_stride=2, D=3):
        super().__init__()
        layers = []
        cin = 1
        for i, c in enumerate(channels):
            layers += [nn.Conv2d(cin, c, 3, stride=first_stride if i == 0 else 2, padding=1),
                       nn.BatchNorm2d(c, track_running_stats=False), nn.ReLU()]
            cin = c
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, n_patterns(D))

    def forward(self, images):
        """Logits (B, 2^D) of the rule bits for images (B, H, W) of 0/1 values."""
        h = self.body(images.float()[:, None] * 2.0 - 1.0)
        return self.head(h.mean((2, 3))).double()


def recog_log_prob(logits, bits):
    """log r(z | x) of rule bits (B, M, 2^D) under the Bernoulli logits (B, 2^D): (B, M)."""
    lg = logits[:, None, :]
    return (bits * F.logsigmoid(lg) + (1.0 - bits) * F.logsigmoid(-lg)).sum(-1)


def recog_sample(logits, m, generator):
    """m rules per image (B, m), long, drawn from r(z | x) with the given generator."""
    p = torch.sigmoid(logits.detach())[:, None, :].expand(-1, m, -1)
    bits = (torch.rand(p.shape, generator=generator, dtype=torch.float64) < p).double()
    return bits_rule(bits)


# ---------------------------------------------------------------- the memory Q_i

def memory_merge(mem_rules, mem_scores, prop_rules, prop_scores):
    """One wake update of the memories of a batch: the best K distinct rules of the union of the
    memory (B, K; -1 marks an empty slot, whose score must be -inf) and the proposals (B, P).
    Scores are log p_theta(z, x_i) under the current theta. Returns (rules, scores), (B, K),
    sorted best first; ties keep the memory's element first. Never lowers the best score."""
    rules = torch.cat([mem_rules, prop_rules], 1)
    scores = torch.cat([mem_scores, prop_scores], 1)
    M = rules.shape[1]
    same = rules[:, :, None] == rules[:, None, :]
    earlier = torch.tril(torch.ones(M, M, dtype=torch.bool), diagonal=-1)
    dup = (same & earlier[None]).any(2) | (rules < 0)
    scores = scores.masked_fill(dup, -math.inf)
    rules = rules.masked_fill(dup, -1)
    K = mem_rules.shape[1]
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :K]
    return torch.gather(rules, 1, order), torch.gather(scores, 1, order)


def memory_scores(model, counts, mem_rules):
    """log p_theta(z, x_i) of the memory's rules (B, K), -inf at empty slots (rule -1)."""
    s = model.log_joint(counts, rule_bits(mem_rules.clamp(min=0), model.D))
    return s.masked_fill(mem_rules < 0, -math.inf)


# ---------------------------------------------------------------- training

METHODS = ("mws-sleep", "mws-mem", "rws-sleep", "rws-wake", "exact")


def train(images, method, K, iters, seed, batch=25, lr_p=0.01, lr_r=1e-3, eps0=0.1, channels=(16, 16, 32, 32),
          log=None, log_every=0, D=3):
    """Learns eps, the rule prior and r on images (N, H, W) of 0/1 values of automata with
    neighbourhood D by one method: "mws-sleep" / "mws-mem" (memoised wake-sleep, Algorithm 1 of
    seed 001, r trained by dreams or on the memory), "rws-sleep" / "rws-wake" (reweighted
    wake-sleep with K importance samples; "rws-wake" needs K > 1), or "exact" (EM on the exact
    posterior over all rules, CAModel.posterior_bits, the reference). Each iteration draws K
    proposals per image from r (MWS and RWS alike). Adam for p (lr_p) and r (lr_r), both decayed
    linearly to zero over the second half. Returns a dict: model, net, memory (N, K rules, or
    None), samples_drawn, trace (iteration, eps) pairs. Raises ValueError on an unknown method or
    K < 1, K = 1 for rws-wake, or a D outside NEIGHBOURHOODS."""
    if method not in METHODS:
        raise ValueError("unknown method %r" % method)
    if K < 1 or (method == "rws-wake" and K < 2):
        raise ValueError("K must be >= 1 (>= 2 for rws-wake)")
    g = torch.Generator()
    g.manual_seed(seed)
    torch.manual_seed(seed)  # the network's initial weights
    N, H, W = images.shape
    counts = pattern_counts(images, D)
    model = CAModel(eps0, W, H, D)
    net = RecogNet(channels, D=D)
    opt_p = torch.optim.Adam(model.parameters(), lr=lr_p)
    opt_r = torch.optim.Adam(net.parameters(), lr=lr_r)
    half = iters // 2
    sched = lambda it: 1.0 if it < half else max(0.0, (iters - it) / (iters - half))  # noqa: E731
    s_p = torch.optim.lr_scheduler.LambdaLR(opt_p, sched)
    s_r = torch.optim.lr_scheduler.LambdaLR(opt_r, sched)
    mws = method.startswith("mws")
    mem = torch.full((N, K), -1, dtype=torch.long) if mws else None
    trace = []
    drawn = 0
    for it in range(iters):
        idx = torch.randperm(N, generator=g)[:batch]
        x, c = images[idx], counts[idx]
        loss_r = None
        if method == "exact":
            # E_q[log p(z, x)] under the exact posterior q: log p(z, x) is linear in the bits, so
            # the expectation is log p at q's bit probabilities
            q = model.posterior_bits(c).detach()
            loss_p = -model.log_joint(c, q[:, None, :])[:, 0].mean()
        else:
            real_grad = method in ("mws-mem", "rws-wake")
            with torch.set_grad_enabled(real_grad):
                logits = net(x)
            props = recog_sample(logits, K, g)
            drawn += props.numel()
            if mws:
                with torch.no_grad():
                    ms = memory_scores(model, c, mem[idx])
                    ps = model.log_joint(c, rule_bits(props, D))
                    mem[idx], _ = memory_merge(mem[idx], ms, props, ps)
                z = mem[idx]
                lj = memory_scores(model, c, z)
                w = torch.softmax(lj.detach(), 1)  # Q_i's optimal weights; 0 at empty slots
                loss_p = -(w * lj.masked_fill(z < 0, 0.0)).sum(1).mean()
                if method == "mws-mem":
                    lr_ = recog_log_prob(logits, rule_bits(z.clamp(min=0), D))
                    loss_r = -(w * lr_.masked_fill(z < 0, 0.0)).sum(1).mean()
            else:
                zb = rule_bits(props, D)
                lj = model.log_joint(c, zb)
                lq = recog_log_prob(logits, zb)
                w = torch.softmax(lj.detach() - lq.detach(), 1)
                loss_p = -(w * lj).sum(1).mean()
                if method == "rws-wake":
                    loss_r = -(w * lq).sum(1).mean()
            if method.endswith("sleep"):
                zs, xs = model.sample(batch, g)
                loss_r = -recog_log_prob(net(xs), rule_bits(zs[:, None], D))[:, 0].mean()
        # per-cell scale so that lr_p means the same for every image size
        loss = loss_p / (H * W) + (loss_r if loss_r is not None else 0.0)
        opt_p.zero_grad()
        opt_r.zero_grad()
        loss.backward()
        opt_p.step()
        s_p.step()
        if loss_r is not None:
            opt_r.step()
            s_r.step()
        if log_every and (it % log_every == 0 or it == iters - 1):
            trace.append((it, model.eps().item()))
            if log is not None:
                log("%s K=%d it %d eps %.5f" % (method, K, it, model.eps().item()))
    return {"model": model, "net": net, "memory": mem, "samples_drawn": drawn, "trace": trace}


@torch.no_grad()
def infer_rules(result, images, method, K, generator):
    """The rule each trained method infers for images (N, H, W): MWS its memory's best element
    when the images are its training set (result["memory"] given and of the same N), otherwise
    (and for RWS) the best of K proposals from r under the importance weight p(z, x) / r(z | x)
    (for exact: the posterior mode). Returns (N,) long."""
    model, net = result["model"], result["net"]
    c = pattern_counts(images, model.D)
    if method == "exact":
        return bits_rule((model.posterior_bits(c) > 0.5).double())
    mem = result.get("memory")
    if mem is not None and mem.shape[0] == images.shape[0]:
        return mem[:, 0].clone()
    out = []
    for s in range(0, images.shape[0], 100):
        logits = net(images[s:s + 100])
        props = recog_sample(logits, K, generator)
        zb = rule_bits(props, model.D)
        w = model.log_joint(c[s:s + 100], zb) - recog_log_prob(logits, zb)
        out.append(torch.gather(props, 1, w.argmax(1, keepdim=True))[:, 0])
    return torch.cat(out)


def make_dataset(n, height, width, eps, seed, D=3):
    """The data set of supplement 7.6: per-bit probabilities u_b ~ U(0, 1) drawn once, n rules
    z_i ~ Bernoulli(u), uniform random first rows, images rendered with noise eps by automata of
    neighbourhood D. Returns (images (n, height, width), rules (n,), u (2^D,)). Deterministic in
    (seed, D)."""
    g = torch.Generator()
    g.manual_seed(seed)
    u = torch.rand(n_patterns(D), generator=g, dtype=torch.float64)
    bits = (torch.rand(n, u.shape[0], generator=g, dtype=torch.float64) < u).double()
    rules = bits_rule(bits)
    first = (torch.rand(n, width, generator=g) < 0.5).double()
    return ca_render(rules, first, height, eps, g, D), rules, u

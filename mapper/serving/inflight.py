"""In-flight (continuous) batching, request by request and step by step (``mapper serve``).

One replica runs steps back to back (Yu et al., "Orca", OSDI 2022: iteration-level
scheduling). Before each step the scheduler forms the batch, first come first served:

1. every running sequence that has its prompt in the cache decodes one token; with a KV cache
   taken as tokens arrive (vLLM), a sequence whose next token needs a new block when none is
   free preempts the most recently admitted running sequence, whose blocks are freed and whose
   prompt and tokens so far are computed again later (Kwon et al., "vLLM", SOSP 2023, section
   4.5, recomputation);
2. sequences part-way through their prompt take their next chunk;
3. waiting requests are admitted in arrival order while the batch has fewer than ``max_batch``
   sequences, the step has token budget left (``chunk``, TensorRT-LLM's ``max_num_tokens``,
   vLLM's ``max_num_batched_tokens``) and the KV cache has the blocks: for the whole prompt and
   output when the runtime guarantees no eviction (TensorRT-LLM's ``GUARANTEED_NO_EVICT``),
   else for the chunk it computes now. The first request that does not fit stops admission, and
   a step that preempted admits nobody (vLLM V1's scheduler schedules waiting requests only when
   it preempted none).

With ``cached`` (the decode pool of a disaggregated plan, :mod:`mapper.serving.disagg`) each
request arrives with its prompt's KV cache and its first token from a prefill replica: it is
admitted, first come first served, when its blocks are free (for its whole output when the
runtime reserves them) and decodes from the next batch on; a preempted one recomputes its prompt
here as in the colocated case.

With a sliding window of ``W`` (``window``) a sequence keeps its last ``W`` positions only
(:func:`mapper.core.opdefs.dnn.held_positions`: vLLM frees the blocks that leave the window,
TensorRT-LLM keeps a cyclic cache of ``max_attention_window_size`` tokens), a decode reads at
most ``W`` of them and a chunk's query ``i`` computes ``min(p + i + 1, W)`` pairs.

Decodes take one token of the budget each and prefill chunks the rest (Agrawal et al.,
Sarathi-Serve, OSDI 2024: stall-free batching). With ``mixed`` off a step runs prompts or
decodes, never both, prompts first: a step that can give a prompt its next chunk or admit a
waiting request runs prompts only, and the running sequences decode in the steps between
(vLLM's V0 scheduler without chunked prefill and SGLang's default: the "prefill-prioritizing"
schedule Sarathi-Serve describes, whose prefills stall the decodes). With ``steps`` =
``n`` > 1 the scheduler decides once per ``n`` decode steps (vLLM's ``--num-scheduler-steps``,
multi-step scheduling, vLLM blog 2024-09-05): a step that only decodes starts a run of ``n``
decode steps of the same sequences (those that end drop out), and no prompt is scheduled or
request admitted until the run ends. With ``lag`` = ``k`` a token reaches the client at the end of
the ``k``-th step after the one that computed it (vLLM V0's asynchronous output processing, which
processes a step's outputs while the next step runs: same blog post), or at the replica's last
step when fewer follow; the first token and the end move, the tokens per second do not.

The step's time is ``step(batch)`` (:class:`mapper.serving.iteration.StepModel`) plus, on a step
that follows a scheduling decision, the runtime's host ``overhead`` (the CPU time of scheduling,
preparing inputs and returning outputs that the GPU waits for; a multi-step run pays it once,
which is what multi-step scheduling is for: vLLM RFC "Multi-Step Scheduling", vllm-project/vllm
issue 6854). A prompt's
last chunk yields the request's first token (its time to first token is the step's end less
its arrival); each decode one more; a request ends with its last output token. A runtime's
``front`` delays each request's arrival at the scheduler (its HTTP server, tokenizer and
inter-process hops, :mod:`mapper.serving.runtimes`): it adds to time to first token and end to
end, not to the time between tokens. A runtime that streams returns every token as its step
ends, and the host time of those responses (``stream`` seconds each: building the response,
the callback into the server, its queues) lies between the step and the next one, so each step
costs ``stream`` times the tokens it returns more (TensorRT-LLM's batch manager returns a
streamed request's tokens from its step loop; its developers name this per-response host time
as what ``stream_interval`` cuts at high concurrency: NVIDIA/TensorRT-LLM pull request 5284 and
its tech blog 8, "Scaling Expert Parallelism", part 2; vLLM pull request 27869 likewise).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from mapper.core.opdefs.dnn import held_positions, visible_keys
from mapper.errors import InfeasibleError
from mapper.serving.iteration import Batch
from mapper.serving.workload import Arrival


@dataclass(frozen=True, slots=True)
class Scheduler:
    """A runtime's scheduling limits (:class:`mapper.serving.runtimes.Runtime`)."""

    capacity: int  # KV-cache tokens of the replica
    block: int
    max_batch: int
    chunk: int
    reserve_output: bool
    overhead: float = 0.0
    window: int = 0  # a sliding window's positions kept per sequence (0: all)
    mixed: bool = True  # prompts and decodes share a step (stall-free batching), else prefill-first steps
    steps: int = 1  # decode steps the scheduler runs per decision (multi-step scheduling)
    lag: int = 0  # steps after the one that computes a token before it is returned (async output processing)
    front: float = 0.0  # seconds from a request's arrival until the scheduler sees it (the runtime's front end)
    stream: float = 0.0  # host seconds per token a step returns while streaming (each step's responses)


@dataclass(frozen=True, slots=True)
class Served:
    """One request's times (seconds from time 0) and its arrival."""

    arrival: float
    admitted: float  # the start of the step it was first scheduled in
    first: float  # the end of the step that gave its first token
    done: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Run:
    served: tuple[Served, ...]  # in the order of the requests given
    steps: int
    preemptions: int
    max_running: int
    peak_blocks: int
    #: per step: its end (seconds), the sequences it ran, the KV blocks in use, the requests waiting
    timeline: tuple[tuple[float, int, int, int], ...] = ()
    blocks: int = 0  # KV blocks of the replica


def _blocks(tokens: int, block: int, window: int = 0) -> int:
    return -(-held_positions(tokens, window) // block)


@dataclass(slots=True)
class Feed:
    """The requests one replica has been given so far (arrival order) and, as it runs, the
    times its requests ended; ``closed`` once no more will come (:mod:`mapper.serving.dispatch`)."""

    given: list[float] = field(default_factory=list)
    inp: list[int] = field(default_factory=list)
    out: list[int] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)  # step ends, one per request ended, in time order
    closed: bool = False

    def add(self, r: Arrival) -> None:
        self.given.append(r.arrival or 0.0)
        self.inp.append(r.input_tokens)
        self.out.append(r.output_tokens)


def check(requests: list[Arrival], sched: Scheduler) -> None:
    """Exit if a request needs more KV cache than a replica holds."""
    for i, r in enumerate(requests):
        need = r.input_tokens + r.output_tokens - 1  # cached at its last step: a longer request could never end
        if _blocks(need, sched.block, sched.window) > sched.capacity // sched.block:
            raise InfeasibleError(f"request {i + 1} needs {need:,} tokens of KV cache; a replica holds "
                                  f"{sched.capacity:,}: give more GPUs per replica or a shorter request")


def simulate(requests: list[Arrival], step: Callable[[Batch], float], sched: Scheduler,
             cached: bool = False) -> Run:
    """Serve ``requests`` (arrival times given, in order) on one replica (module docstring);
    ``cached``: they arrive with their prompt cached and their first token given."""
    check(requests, sched)
    feed = Feed(closed=True)
    for r in requests:
        feed.add(r)
    return drain(engine(feed, step, sched, cached))


def drain(replica: Generator[float, None, Run]) -> Run:
    """Run a replica's :func:`engine` to its end (its feed closed)."""
    while True:
        try:
            next(replica)
        except StopIteration as stop:
            return stop.value


def engine(feed: Feed, step: Callable[[Batch], float], sched: Scheduler,
           cached: bool = False) -> Generator[float, None, Run]:
    """One replica as a generator: it yields the time its next step starts before it takes the
    requests that have arrived by then (``inf`` while it has none and the feed is open), so a
    dispatcher can run several replicas on one clock and give requests out as they arrive; it
    returns the :class:`Run` once the feed is closed and every request has ended."""
    given, inp, out = feed.given, feed.inp, feed.out
    arrive: list[float] = []
    total_blocks = sched.capacity // sched.block
    bs, w = sched.block, sched.window
    target: list[int] = []  # tokens to have cached before the next token comes from a prefill
    done: list[int] = []  # tokens in the cache
    emitted: list[int] = []
    held: list[int] = []  # blocks held
    admitted: list[float] = []
    first: list[float] = []
    finish: list[float] = []
    free = total_blocks
    waiting: deque[int] = deque()
    running: list[int] = []
    nxt = 0
    now = 0.0
    steps = preempt = max_running = 0
    peak = 0
    timeline: list[tuple[float, int, int, int]] = []
    run = 0  # decode steps left in the current multi-step run
    stalled = False  # a prefill-first step found no prompt it could schedule: the next one decodes

    def evict() -> None:
        """Preempt the most recently admitted running sequence: free its blocks; it recomputes."""
        nonlocal free, preempt
        j = running.pop()
        free += held[j]
        held[j] = done[j] = 0
        target[j] = inp[j] + emitted[j]
        waiting.appendleft(j)
        preempt += 1

    def take() -> None:
        """Extend the per-request state to the requests given since."""
        for i in range(len(arrive), len(given)):
            arrive.append(given[i] + sched.front)
            target.append(inp[i])
            done.append(0)
            emitted.append(0)
            held.append(0)
            admitted.append(math.nan)
            first.append(math.nan)
            finish.append(math.nan)

    while True:
        take()
        if not running and not waiting:
            if nxt == len(arrive):
                if feed.closed:
                    break
                yield math.inf
                continue
            now = max(now, arrive[nxt])
        yield now
        take()
        while nxt < len(arrive) and arrive[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        while cached and waiting and math.isnan(admitted[waiting[0]]) and len(running) < sched.max_batch:
            i = waiting[0]
            need = _blocks(inp[i] + (out[i] - 1 if sched.reserve_output else 0), bs, w)
            if need > free:
                break
            waiting.popleft()
            free -= need
            held[i] = need
            done[i] = inp[i]
            emitted[i] = 1
            admitted[i] = first[i] = now
            running.append(i)
        budget = sched.chunk
        evicted = preempt  # a step that preempts admits nobody (vLLM V1's scheduler)
        decodes: list[int] = []
        chunks: list[tuple[int, int]] = []
        dctx = 0
        k = 0
        prompts = run == 0 and (sched.mixed or (not stalled and _prompt_step(running, waiting, done, target,
                                                                             admitted, cached)))
        while k < len(running) and budget > 0:
            i = running[k]
            if done[i] >= target[i]:  # decode one token
                if not sched.mixed and prompts:
                    k += 1
                    continue
                if not sched.reserve_output and held_positions(done[i] + 1, w) > held[i] * bs:
                    while free == 0 and running[-1] != i:
                        evict()
                    if free == 0:  # it is the last admitted: it waits itself
                        evict()
                        break
                    free -= 1
                    held[i] += 1
                decodes.append(i)
                dctx += held_positions(done[i] + 1, w)
                budget -= 1
            elif prompts:
                c = _chunk(i, budget, done, target, held, free, bs, sched.reserve_output, w)
                if c > 0:
                    if not sched.reserve_output:
                        grow = _blocks(done[i] + c, bs, w) - held[i]
                        free -= grow
                        held[i] += grow
                    chunks.append((i, c))
                    budget -= c
            k += 1
        while (prompts and waiting and budget > 0 and len(running) < sched.max_batch and preempt == evicted
               and not (cached and math.isnan(admitted[waiting[0]]))):
            i = waiting[0]
            if sched.reserve_output:
                need = _blocks(target[i] + out[i] - emitted[i] - 1, bs, w)
                if need > free:
                    break
                c = min(target[i], budget)
            else:
                c = _chunk(i, budget, done, target, held, free, bs, False, w)
                if c <= 0:
                    break
                need = _blocks(c, bs, w)
            waiting.popleft()
            free -= need
            held[i] = need
            running.append(i)
            if math.isnan(admitted[i]):
                admitted[i] = now
            chunks.append((i, c))
            budget -= c
        if not decodes and not chunks:
            if run:  # a multi-step run with nothing left to decode ends early
                run = 0
                continue
            if not sched.mixed and prompts and any(done[i] >= target[i] for i in running):
                stalled = True  # no prompt could take a block: the running sequences decode instead
                continue
            evict()  # prompts part-way hold every block: the last admitted waits again
            continue
        stalled = False
        decided = run == 0  # this step follows a scheduling decision (not the middle of a multi-step run)
        if sched.steps > 1:
            run = run - 1 if run > 0 else (sched.steps - 1 if not chunks else 0)
        max_running = max(max_running, len(running))
        peak = max(peak, total_blocks - free)
        tokens = len(decodes) + sum(c for _, c in chunks)
        sampled = len(decodes) + sum(1 for i, c in chunks if done[i] + c >= target[i])
        pairs = sum(visible_keys(c, done[i], w) for i, c in chunks)
        host = (sched.overhead if decided else 0.0) + sched.stream * sampled
        now += step(Batch(tokens, sampled, dctx, pairs, len(decodes) + len(chunks))) + host
        steps += 1
        timeline.append((now, len(decodes) + len(chunks), total_blocks - free, len(waiting)))
        ended = []
        for i in decodes:
            done[i] += 1
            emitted[i] += 1
            if emitted[i] >= out[i]:
                ended.append(i)
        for i, c in chunks:
            done[i] += c
            if done[i] >= target[i]:
                emitted[i] += 1
                if math.isnan(first[i]):
                    first[i] = now
                if emitted[i] >= out[i]:
                    ended.append(i)
        if ended:
            gone = set(ended)
            for i in ended:
                finish[i] = now
                feed.ended.append(now)
                free += held[i]
                held[i] = 0
            running = [i for i in running if i not in gone]
    if sched.lag:
        ends = [t[0] for t in timeline]
        index = {t: k for k, t in enumerate(ends)}  # step ends are strictly increasing
        last = len(ends) - 1
        first = [ends[min(index[t] + sched.lag, last)] if t in index else t for t in first]
        finish = [ends[min(index[t] + sched.lag, last)] for t in finish]
    served = tuple(Served(given[i], admitted[i], first[i], finish[i], inp[i], out[i]) for i in range(len(given)))
    return Run(served, steps, preempt, max_running, peak, tuple(timeline), total_blocks)


def _prompt_step(running: list[int], waiting: deque[int], done: list[int], target: list[int],
                 admitted: list[float], cached: bool) -> bool:
    """Whether a prefill-first scheduler gives this step to prompts: one is part-way or one waits
    to be admitted (a cached request, already past its prompt, is admitted beside the decodes)."""
    return (any(done[i] < target[i] for i in running)
            or any(not (cached and math.isnan(admitted[i])) for i in waiting))


def _chunk(i: int, budget: int, done: list[int], target: list[int], held: list[int], free: int, bs: int,
           reserved: bool, window: int = 0) -> int:
    """The prompt tokens sequence ``i`` computes this step: its rest, up to the budget and, with
    blocks taken as tokens arrive, what the free blocks hold (all of it when they hold its window)."""
    c = min(target[i] - done[i], budget)
    if not reserved and not (0 < window <= (held[i] + free) * bs):
        c = min(c, (held[i] + free) * bs - done[i])
    return max(c, 0)

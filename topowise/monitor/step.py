"""StepMonitor, the torch side: times each training step of the user's own loop and the time each rank
waits for the slowest one, without a profiler and without synchronising the GPU inside a step.

Per step, per rank: three marks on the compute stream (CUDA events on GPU, perf_counter on CPU): the
step's start, the moment the rank's own backward compute is done ("ready", from a hook on the first
module of the forward, or `mon.ready()`), and the step's end. GPU events are read two steps later
(they are done by then; reading them costs no wait). Each rank's two numbers (end - start,
end - ready), with its GPU's SM clock and clock event reasons as the step ended (NVML, read on the host),
go to the other ranks through an asynchronous all_gather of 5 floats on a gloo group of the monitor's
own (CPU tensors: no NCCL call, no GPU sync), collected one step later. From those,
topowise.monitor.rules.waits says which rank was late and how long each other rank waited for it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections import deque
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn

from topowise.measure import gpu_clocks
from topowise.measure.records import versioned
from topowise.monitor import rules

READ_AFTER_STEPS = 2  # GPU events are read this many steps after they were recorded
MAX_IN_FLIGHT = 4  # gathers left running before the host waits for the oldest


def _collective_of(model) -> str:
    """What the strategy waits on at the end of the step, named from the wrapper's type."""
    if model is None:
        return "the step's collectives"
    kind = type(model).__name__
    module = type(model).__module__
    if kind == "DistributedDataParallel":
        return "the gradient all-reduce"
    if kind.startswith("FSDP") or "fsdp" in module.lower():
        return "FSDP's gradient reduce-scatter"
    if "deepspeed" in module.lower():
        return "DeepSpeed's gradient reduction"
    return "the step's collectives"


class _Marks:
    """One step's marks: events on GPU, host times on CPU."""

    __slots__ = ("step", "start", "ready", "end", "phases", "wall", "sm_mhz", "clock_reasons")

    def __init__(self, step: int):
        self.step = step
        self.start = self.ready = self.end = None
        self.phases: list[tuple[str, object]] = []
        self.wall = time.time()
        self.sm_mhz, self.clock_reasons = math.nan, 0  # the GPU's, as the step ends (NVML)


class StepMonitor:
    """Wrap a training step in two lines:

        mon = StepMonitor("runs/exp1", model=model)      # once, on every rank, after init_process_group
        for batch in data:
            with mon.step():                               # or mon.step_begin() ... mon.step_end()
                loss = model(batch).sum(); loss.backward(); opt.step(); opt.zero_grad()
        mon.close()                                        # on every rank (a collective), before destroy_process_group

    Writes RUN_DIR/monitor.rank<R>.jsonl (one line per step), TensorBoard scalars of every rank from
    rank 0 (RUN_DIR/tensorboard), and one stderr line per spike from rank 0.

    model: the (wrapped) model; the monitor hooks the first module of its forward to learn when this
      rank's backward compute is done, and names the collective from the wrapper (DDP, FSDP2,
      DeepSpeed). Without it, only a late start is seen (or call `mon.ready()` where compute ends).
    collective: the name of what the step waits on, where the default is not right.
    plan / predicted_step_s: a `topowise plan --save-plan` file, or a number: the predicted step time,
      written beside the measured one.
    factor, window, warmup: the spike rule (topowise.monitor.rules): above factor x the running median
      of the last `window` steps, the first `warmup` steps not judged.
    gather_every: all_gather the per-rank numbers every this many steps (1: every step).
    group: a gloo process group to gather on (default: a new one over all ranks).
    """

    def __init__(self, run_dir: str | os.PathLike, *, model: nn.Module | None = None, collective: str | None = None,
                 plan: str | os.PathLike | None = None, predicted_step_s: float | None = None,
                 factor: float = rules.FACTOR, window: int = rules.WINDOW, warmup: int = rules.WARMUP,
                 gather_every: int = 1, tensorboard: bool | None = None, group=None, quiet: bool = False):
        if plan is not None and predicted_step_s is None:
            from topowise.export.plan import load_plan_file

            predicted_step_s = load_plan_file(str(plan)).step_time_s or None
        self.predicted_step_s = predicted_step_s
        self.factor, self.warmup, self.window = factor, warmup, window
        self.gather_every = max(1, int(gather_every))
        self.collective = collective or _collective_of(model)
        self.quiet = quiet
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.group = None
        if self.distributed and self.world_size > 1:
            self.group = group if group is not None else dist.new_group(backend="gloo")
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.dir / f"monitor.rank{self.rank}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        self._writer = self._tensorboard(tensorboard) if self.rank == 0 else None
        self._step = 0
        self._current: _Marks | None = None
        self._unread: deque[_Marks] = deque()  # marks whose events may not be done yet
        self._rows: list[tuple[_Marks, list[float]]] = []  # read, waiting for the next gather
        self._in_flight: list = []  # (work, gathered tensor, [(marks, row)])
        self._step_medians = [rules.RunningMedian(window) for _ in range(self.world_size)]
        self._wait_medians = [rules.RunningMedian(window) for _ in range(self.world_size)]
        self._hooks: list = []
        self._anchor = None
        # this rank's GPU's SM clock, read as each step ends: a rank late because its GPU ran slow says so
        self._clock = _own_gpu_clock() if self.cuda else None
        if model is not None:
            self._probe_first_module(model)
        self._write({"kind": "start", "rank": self.rank, "world_size": self.world_size, "collective": self.collective,
                     "device": "cuda" if self.cuda else "cpu", "predicted_step_s": predicted_step_s,
                     "factor": factor, "window": window, "warmup": warmup, "gather_every": self.gather_every,
                     "ready_hook": model is not None, "time": time.time()})

    # ---- the user's marks -------------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, step: int | None = None):
        self.step_begin(step)
        try:
            yield self
        finally:
            self.step_end()

    def step_begin(self, step: int | None = None) -> None:
        if step is not None:
            self._step = step
        self._current = _Marks(self._step)
        self._current.start = self._mark()

    def phase(self, name: str) -> None:
        """From here to the next phase mark (or the step's end) is phase `name` (this rank's own view)."""
        if self._current is not None:
            self._current.phases.append((name, self._mark()))

    def ready(self) -> None:
        """This rank's own compute of the step is done here (the last such call in a step counts)."""
        if self._current is not None:
            self._current.ready = self._mark()

    def step_end(self) -> None:
        marks = self._current
        if marks is None:
            return
        marks.end = self._mark()
        if self._clock is not None:
            marks.sm_mhz, marks.clock_reasons = self._clock.read()
        self._current = None
        self._step = marks.step + 1
        self._unread.append(marks)
        self._collect(final=False)

    def close(self) -> None:
        """Read and gather what is left, write it, close the files. Every rank calls it (it gathers)."""
        if self._file.closed:
            return
        self._collect(final=True)
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        if self._clock is not None:
            self._clock.close()
            self._clock = None
        self._file.close()
        if self._writer is not None:
            self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- marks ------------------------------------------------------------------------------------

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _elapsed(self, a, b) -> float:
        if a is None or b is None:
            return math.nan
        if self.cuda:
            return a.elapsed_time(b) / 1e3
        return b - a

    def _probe_first_module(self, model: nn.Module) -> None:
        """On the first forward, find the first module with parameters that runs; from then on, a tensor
        hook on its output marks "ready" when the backward reaches it (all later layers' gradients done)."""
        order: list[nn.Module] = []
        probes = [m.register_forward_hook(lambda mod, _i, _o: order.append(mod))
                  for m in model.modules() if next(m.parameters(recurse=False), None) is not None]

        def after_root_forward(_mod, _inputs, _output):
            for handle in probes:
                handle.remove()
            root.remove()
            if order:
                self._anchor = order[0]
                self._hooks.append(order[0].register_forward_hook(self._on_anchor_forward))

        root = model.register_forward_hook(after_root_forward)
        self._hooks.extend(probes + [root])

    def _on_anchor_forward(self, _mod, _inputs, output) -> None:
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(self._on_anchor_grad)

    def _on_anchor_grad(self, _grad) -> None:
        self.ready()

    # ---- reading, gathering, judging --------------------------------------------------------------

    def _collect(self, final: bool) -> None:
        self._finish_gathers(wait=final)
        keep = 0 if (final or not self.cuda) else READ_AFTER_STEPS
        while len(self._unread) > keep:
            marks = self._unread.popleft()
            if self.cuda:
                marks.end.synchronize()  # recorded READ_AFTER_STEPS steps ago: already done
            self._rows.append((marks, self._row(marks)))
        if self._rows and (final or len(self._rows) >= self.gather_every):
            self._start_gather()
        if final:
            self._finish_gathers(wait=True)

    def _row(self, marks: _Marks) -> list[float]:
        return [float(marks.step), self._elapsed(marks.start, marks.end), self._elapsed(marks.ready, marks.end),
                marks.sm_mhz, float(marks.clock_reasons)]

    def _start_gather(self) -> None:
        batch, self._rows = self._rows, []
        mine = torch.tensor([row for _m, row in batch], dtype=torch.float64)
        if self.group is None:
            self._in_flight.append((None, [mine], batch))
            return
        parts = [torch.empty_like(mine) for _ in range(self.world_size)]
        work = dist.all_gather(parts, mine, group=self.group, async_op=True)
        self._in_flight.append((work, parts, batch))

    def _finish_gathers(self, wait: bool) -> None:
        """Judge the gathers that are done, oldest first. One issued a step ago is normally done: the
        host waits on one only at close() or when MAX_IN_FLIGHT are still out (a rank far behind)."""
        while self._in_flight:
            work, parts, batch = self._in_flight[0]
            if work is not None and not work.is_completed():
                if not wait and len(self._in_flight) < MAX_IN_FLIGHT:
                    return
                work.wait()
            self._in_flight.pop(0)
            gathered = torch.stack(parts)
            for index, (marks, _row) in enumerate(batch):
                self._judge(marks, gathered[:, index, :].tolist())

    def _judge(self, marks: _Marks, rows: list[list[float]]) -> None:
        step_times = [r[1] for r in rows]
        sm_mhz, clock_reasons = [r[3] for r in rows], [int(r[4]) for r in rows]
        arrival = rules.Arrival(tuple(step_times), tuple(r[2] for r in rows))
        found = rules.waits(arrival)
        judged = marks.step >= self.warmup
        record = {}
        spikes = []
        for rank in range(self.world_size):
            step_median = self._step_medians[rank].median
            wait_median = self._wait_medians[rank].median
            step_spike = judged and rules.is_spike(step_times[rank], step_median, self.factor)
            wait_spike = judged and rules.is_wait_spike(found.wait_s[rank], wait_median, step_times[rank],
                                                                step_median, self.factor)
            if rank == self.rank:
                record = {"step_median_s": _num(step_median), "wait_median_s": _num(wait_median),
                          "spike": {"step_time": step_spike, "wait": wait_spike}}
            if wait_spike or step_spike:
                spikes.append((rank, wait_spike, found.wait_s[rank], wait_median, step_times[rank], step_median))
            if judged:
                self._step_medians[rank].add(step_times[rank])
                self._wait_medians[rank].add(found.wait_s[rank])
        own = rows[self.rank]
        phases = self._phases(marks)
        line = {"kind": "step", "step": marks.step, "rank": self.rank, "world_size": self.world_size,
                "time": marks.wall, "step_time_s": _num(own[1]), "ready_to_end_s": _num(own[2]),
                "wait_s": _num(found.wait_s[self.rank]), "slowest_rank": found.slowest_rank,
                "slow_by_s": _num(found.slow_by_s), "late_at": found.late_at, "collective": self.collective,
                "phases": phases, "predicted_step_s": self.predicted_step_s, "judged": judged,
                "step_times_s": [_num(t) for t in step_times], "waits_s": [_num(w) for w in found.wait_s],
                "sm_mhz": [_num(m) for m in sm_mhz], "clock_reasons": clock_reasons, **record}
        self._write(line)
        if self._writer is not None:
            self._to_tensorboard(marks.step, step_times, found.wait_s)
        if spikes and self.rank == 0 and not self.quiet:
            self._say(marks.step, found, spikes,
                      rules.clock_cause(sm_mhz, clock_reasons, found.slowest_rank, gpu_clocks.reason_words))

    def _phases(self, marks: _Marks) -> dict[str, float]:
        out: dict[str, float] = {}
        bounds = [*marks.phases, ("", marks.end)]
        for (name, begin), (_next, end) in zip(bounds, bounds[1:]):
            out[name] = _num(out.get(name, 0.0) + self._elapsed(begin, end))
        return out

    def _say(self, step: int, found: rules.Waits, spikes: list, clock: str | None = None) -> None:
        """One stderr line: who was late and who waited for it (and, where its GPU's clock was low, that),
        or, where nobody waited, whose step was long."""
        waiting = [s for s in spikes if s[1]]
        if waiting:
            late = "started the step" if found.late_at == "start" else "finished its compute"
            longest = max(waiting, key=lambda s: s[2])
            _rank, _w, wait, wait_median, step_time, step_median = longest
            ranks = ",".join(str(s[0]) for s in waiting)
            text = (f"step {step}: rank {found.slowest_rank} slow ({late} {found.slow_by_s * 1e3:.0f} ms late), "
                    f"rank{'s' if len(waiting) > 1 else ''} {ranks} waited {'up to ' if len(waiting) > 1 else ''}"
                    f"{wait * 1e3:.0f} ms in {self.collective} (median wait {wait_median * 1e3:.1f} ms; "
                    f"step {step_time * 1e3:.0f} ms, {step_time / step_median:.1f}x the median)"
                    + (f"; rank {found.slowest_rank}: {clock}" if clock else ""))
        else:
            longest = max(spikes, key=lambda s: s[4] / s[5])
            rank, _w, _wait, _m, step_time, step_median = longest
            text = (f"step {step}: rank {rank}'s step {step_time * 1e3:.0f} ms, {step_time / step_median:.1f}x "
                    f"the median; no rank waited long for another (the time went in compute, the host, or "
                    f"{self.collective} itself)")
        sys.stderr.write(f"topowise monitor: {text}\n")
        sys.stderr.flush()

    # ---- output -----------------------------------------------------------------------------------

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(versioned(record)) + "\n")  # MonitorStart / MonitorStep, with their version
        self._file.flush()

    def _tensorboard(self, wanted: bool | None):
        if wanted is False:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            if wanted:
                raise
            sys.stderr.write("topowise monitor: no tensorboard package, JSONL only "
                             "(pip install 'topowise[monitor]')\n")
            return None
        return SummaryWriter(log_dir=str(self.dir / "tensorboard"))

    def _to_tensorboard(self, step: int, step_times: list[float], waits: tuple[float, ...]) -> None:
        ranks = [str(r) for r in range(self.world_size)]
        self._writer.add_scalars("step_time_ms", {f"rank{r}": t * 1e3 for r, t in zip(ranks, step_times)}, step)
        self._writer.add_scalars("wait_ms", {f"rank{r}": w * 1e3 for r, w in zip(ranks, waits)}, step)
        if self.predicted_step_s:
            self._writer.add_scalar("predicted_step_ms", self.predicted_step_s * 1e3, step)


def _own_gpu_clock() -> gpu_clocks.DeviceClock | None:
    """This process's GPU through NVML, or None (no NVML, or a torch whose device properties have no
    UUID): the clocks are an extra, never a reason for the user's training to fail."""
    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    return gpu_clocks.DeviceClock.open(str(uuid)) if uuid is not None else None


def _num(value: float) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 7)

"""vinci.open_run: a recorded run as a manifest, an iterator of records and pandas DataFrames."""
import gc
import os
import tomllib

import numpy as np
import pandas as pd
import xxhash

from . import _format
from ._format import DamagedRunError, RunError

PHASES = ("train", "eval", "verify", "coldstart", "tts")
ROLES = ("selection", "policy", "summary")
REWARD_KINDS = ("turn", "scheme", "summary")

# The tables open_run builds, in the order export writes them (docs/python.md lists the columns).
TABLES = ("measurements", "trials", "timings", "turns", "rollouts", "selections", "verifications",
          "library", "skills", "metrics", "fast_p")

# Record kinds the address check follows: (kind, [address fields of its struct]).
_ADDRESS_FIELDS = {
    "sample": ("output", "prompt"),
    "measurement": ("plan", "compileLog"),
    "llmReply": ("prompt", "reply"),
    "selection": ("query", "librarySnapshot"),
    "librarySnapshot": ("snapshot",),
    "parameterDigest": ("checkpoint",),
    "verification": ("skill",),
    "stepBegin": ("librarySnapshot",),
    "blob": ("address",),
    "checkpoint": ("address",),
    "coldStart": ("library", "checkpoint"),
    "modelUpdate": ("request", "reply"),
}


def task_level(task):
    """The level of a task id ("L2_037" -> 2; 0 when the id has none), as vinci's reports read it."""
    return ord(task[1]) - 48 if len(task) > 1 and task[0] == "L" and task[1].isdigit() else 0


def _fields(struct_schema, names):
    fields = struct_schema.schema.fields
    return [fields[n] for n in names]


def open_run(path):
    """Opens the run folder `path` (the one holding manifest.bin and log/).

    Reads the manifest and picks the schema of its format version; the log is read (and checked)
    by records() and by the first table asked for."""
    return Run(path)


class Run:
    """A recorded run. Tables are pandas DataFrames built by one checked pass over the log."""

    def __init__(self, path):
        self.path = os.path.abspath(path.rstrip("/") or "/")
        manifest_path = os.path.join(self.path, "manifest.bin")
        if not os.path.isdir(self.path):
            raise RunError(f"{path}: no such run folder")
        if not os.path.exists(manifest_path):
            raise RunError(f"{manifest_path}: the run has no manifest")
        with open(manifest_path, "rb") as f:
            data = f.read()
        try:
            # Manifest fields are only ever added, so the newest schema reads every version's.
            version = _format.load_schema().Manifest.from_bytes_packed(data).formatVersion
        except Exception as e:  # pycapnp raises KjException on malformed bytes
            raise DamagedRunError(f"{manifest_path}: not a packed Manifest: {e}") from None
        self.format_version = version
        self.schema = _format.load_schema(version)
        self._manifest = self.schema.Manifest.from_bytes_packed(data)
        # A run with its own objects/ folder (a rescore) keeps its objects there; others share
        # their runs root's store (docs/log_format.md).
        own = os.path.join(self.path, "objects")
        self.store = _format.ObjectStore(own if os.path.isdir(own) else os.path.join(os.path.dirname(self.path), "objects"))
        self._tables = None
        self._measurement_tables = None
        self._config = None

    # -- the manifest ---------------------------------------------------------------------------

    @property
    def manifest(self):
        """The manifest as a dict (Data fields as hex strings)."""
        m = self._manifest
        env = m.environment
        return {
            "format_version": m.formatVersion, "name": m.name, "config_path": m.configPath,
            "config_text": m.configText, "seed": m.seed, "world": m.world,
            "environment": {
                "cpu": env.cpu, "gpu": env.gpu, "driver": env.driver, "cuda": env.cuda,
                "libtorch": env.libtorch, "torch_threads": env.torchThreads,
                "aten_cpu_capability": env.atenCpuCapability,
                "openblas_coretype": env.openblasCoretype, "git_revision": env.gitRevision,
                "compiler": env.compiler, "vinci_version": env.vinciVersion,
                "numeric": {kv.key: kv.value for kv in env.numeric},
            },
            "completed": m.completed, "record_count": m.recordCount,
            "run_digest": m.runDigest.hex(), "parent_run": m.parentRun,
            "annotations": {kv.key: kv.value for kv in m.annotations},
        }

    @property
    def name(self):
        return self._manifest.name

    @property
    def completed(self):
        return self._manifest.completed

    @property
    def config(self):
        """The run's effective config (the manifest's TOML text), parsed."""
        if self._config is None:
            self._config = tomllib.loads(self._manifest.configText)
        return self._config

    # -- records --------------------------------------------------------------------------------

    def payloads(self):
        """Every frame's payload (packed Record bytes) in order, checked: segment headers, frame
        lengths and checksums as they are read; at the end, for a completed run, the record count
        and run digest against the manifest. Raises DamagedRunError on any damage."""
        digest = xxhash.xxh3_128()
        digest.update(b"vinci:run-digest\0")
        count = 0
        for path, frames, digest_input in _format.iter_segments(os.path.join(self.path, "log")):
            digest.update(digest_input)
            count += len(frames)
            yield from frames
        m = self._manifest
        if m.completed:
            if count != m.recordCount:
                raise DamagedRunError(
                    f"{self.path}: the log holds {count} records, the manifest records "
                    f"{m.recordCount}: the log is cut short, extended or not this run's")
            if digest.hexdigest() != m.runDigest.hex():
                raise DamagedRunError(
                    f"{self.path}: the log's run digest is {digest.hexdigest()}, the manifest "
                    f"records {m.runDigest.hex()}: the log is not this run's")

    def records(self, kind=None, phase=None):
        """Yields the run's records (pycapnp readers of schema Record) in log order, checked as
        payloads() checks them. `kind` (a union member name such as "measurement", or a set of
        them) and `phase` ("train", "eval", ...) filter them."""
        kinds = {kind} if isinstance(kind, str) else (set(kind) if kind is not None else None)
        for seq, r in self._numbered_records():
            if kinds is not None and r._which_str() not in kinds:
                continue
            if phase is not None and PHASES[r.phase.raw] != phase:
                continue
            yield r

    def _numbered_records(self, check_seq=True):
        """(seq, record) in log order; a record whose seq field is not its place is damage. The
        table pass leaves that check out (a third of a second on 10^6 records): the run digest
        covers every byte of every record already, as it does for vinci's own readers."""
        parse = self.schema.Record.from_bytes_packed
        f_seq = self.schema.Record.schema.fields["seq"]
        for seq, payload in enumerate(self.payloads()):
            try:
                r = parse(payload)
            except Exception as e:  # pycapnp raises KjException on malformed bytes
                raise DamagedRunError(f"{self.path}: record {seq}: not a packed Record: {e}") from None
            if check_seq and r._get_by_field(f_seq) != seq:
                raise DamagedRunError(f"{self.path}: record {seq}: its seq field is {r.seq}")
            yield seq, r

    def object(self, address):
        """(kind, bytes) of an object the run names, its address checked."""
        return self.store.get(address)

    def verify(self, objects=True):
        """Reads the whole log (checksums, count, digest) and, with `objects`, every object a record
        names (present, readable, hashing to its address). Returns the number of records; raises
        DamagedRunError on damage."""
        self._scan(objects=objects)
        if not objects:  # tables built without the object check are not kept
            self._tables = self._measurement_tables = None
        return self._record_count

    # -- tables ---------------------------------------------------------------------------------

    def tables(self):
        """Every table as {name: DataFrame} (TABLES order)."""
        if self._tables is None:
            self._scan(objects=True)
        return dict(self._tables)

    def table(self, name):
        if name not in TABLES:
            raise KeyError(f"no table {name!r}; the tables are {', '.join(TABLES)}")
        return self.tables()[name]

    def _measurement_table(self, name):
        # The measurement tables alone take a lighter pass than every table (docs/python.md).
        if self._tables is not None:
            return self._tables[name]
        if self._measurement_tables is None:
            self._scan(objects=True, only_measurements=True)
        return self._measurement_tables[name]

    def measurements(self):
        """One row per measurement record (every phase)."""
        return self._measurement_table("measurements")

    def trials(self):
        """One row per correctness trial of every measurement."""
        return self._measurement_table("trials")

    def timings(self):
        """One row per timing sample (kernel and reference) of every measurement."""
        return self._measurement_table("timings")

    def turns(self):
        """One row per measured turn: the measurement, its turn reward and policy advantage."""
        return self.table("turns")

    def rollouts(self):
        """One row per rollout: its turns summed up."""
        return self.table("rollouts")

    def selections(self):
        return self.table("selections")

    def verifications(self):
        return self.table("verifications")

    def library(self):
        """One row per library snapshot record."""
        return self.table("library")

    def skills(self):
        """One row per skill of every library snapshot, read from the snapshot's object."""
        return self.table("skills")

    def metrics(self):
        """One row per metric record (fast_p as recorded: speedup >= p; reward_mean, ...)."""
        return self.table("metrics")

    def fast_p(self, thresholds=None, inclusive=None):
        """fast_p per evaluation step, level, threshold, turn mode and denominator, from the
        measurements of the held-out evaluations (phase eval) and of test-time scaling (phase tts,
        at the final evaluation's step), as `replay score` computes it: speedup > p unless
        `inclusive` (default: the run's eval.fast_p_inclusive). Thresholds default to the run's."""
        if thresholds is None and inclusive is None:
            return self.table("fast_p")
        return _fast_p_table(self.measurements(), self._thresholds(thresholds),
                             self._inclusive(inclusive))

    def _thresholds(self, thresholds):
        if thresholds is not None:
            return list(thresholds)
        return list(self.config.get("eval", {}).get("thresholds", [1.0, 1.2, 1.5, 2.0]))

    def _inclusive(self, inclusive):
        if inclusive is not None:
            return bool(inclusive)
        return bool(self.config.get("eval", {}).get("fast_p_inclusive", False))

    # -- the scan -------------------------------------------------------------------------------

    def _scan(self, objects, only_measurements=False):
        """One checked pass over the log. With only_measurements, the measurements, trials and
        timings tables (and the objects measurements name); else every table."""
        # The pass makes millions of small tuples and no reference cycles: the cyclic collector
        # would only re-walk them (about a tenth of the time on a 10^6-record run).
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._scan_log(objects, only_measurements)
        finally:
            if enabled:
                gc.enable()

    def _scan_log(self, objects, only_measurements):
        s = self.schema
        R = s.Record
        f_seq, f_step, f_task, f_scheme, f_rollout, f_turn, f_phase = _fields(
            R, ("seq", "step", "task", "scheme", "rollout", "turn", "phase"))
        union = {name: R.schema.fields[name] for name in R.schema.union_fields}
        f_meas = union["measurement"]
        m_names = ("evaluator", "device", "size", "plan", "compiled", "correct", "decoy", "speedup",
                   "kernelUs", "referenceUs", "statistic", "timeCoverage", "error")
        (mf_evaluator, mf_device, mf_size, mf_plan, mf_compiled, mf_correct, mf_decoy, mf_speedup,
         mf_kernel, mf_reference, mf_statistic, mf_coverage, mf_error) = _fields(s.Measurement, m_names)
        f_trials, f_ktimes, f_rtimes, f_flags, f_log = _fields(
            s.Measurement, ("trials", "kernelTimesUs", "referenceTimesUs", "flags", "compileLog"))
        tf_correct, tf_max, tf_mean, tf_dist, tf_seed = _fields(
            s.Trial, ("correct", "maxAbsErr", "meanAbsErr", "distribution", "seed"))
        rw_fields = _fields(s.Reward, ("value", "kind"))
        adv_fields = _fields(s.Advantage, ("role", "value", "returnValue"))
        smp_fields = _fields(s.BackboneSample, ("role", "logProb"))
        met_names = ("name", "split", "level", "threshold", "turnMode", "denominator", "value",
                     "numerator", "count")
        met_fields = _fields(s.Metric, met_names)
        addr_fields = {k: (union[k], _fields(getattr(s, _struct_of(k)), v))
                       for k, v in _ADDRESS_FIELDS.items() if k != "measurement"}

        pos_names = ("seq", "phase", "step", "task", "scheme", "rollout", "turn")
        # Columns, appended to through bound methods (the fastest way to build them in Python).
        names = pos_names + m_names + ("flags", "n_trials", "n_kernel", "n_reference")
        meas = {name: [] for name in names}
        (a_seq, a_phase, a_step, a_task, a_scheme, a_rollout, a_turn, a_evaluator, a_device, a_size,
         a_plan, a_compiled, a_correct, a_decoy, a_speedup, a_kernel, a_reference, a_statistic,
         a_coverage, a_error, a_flags, a_ntrials, a_nkernel, a_nreference) = [
             meas[name].append for name in names]
        tcols = [[], [], [], [], []]  # per trial: correct, max, mean, distribution, seed
        at_correct, at_max, at_mean, at_dist, at_seed = [c.append for c in tcols]
        times = []  # every timing sample: per measurement its kernel samples, then reference
        # turns: one per measurement; its turn reward, policy advantage and policy sample joined
        # by position (phase, step, task, scheme, rollout, turn).
        turn_reward, turn_adv, turn_ret, turn_logp = [], [], [], []
        turn_at = {}
        pending_sample = {}
        selections, verifications, library = [], [], []
        met = {k: [] for k in ("seq", "phase", "step") + met_names}
        mtcols = [met[k] for k in met_names]
        addresses = set()
        count = 0
        for seq, r in self._numbered_records(check_seq=False):
            count += 1
            kind = r._which_str()
            if kind == "measurement":
                m = r._get_by_field(f_meas)
                get = m._get_by_field
                rget = r._get_by_field
                plan = get(mf_plan)
                kt = get(f_ktimes)
                rt = get(f_rtimes)
                ts = get(f_trials)
                a_seq(seq)
                a_phase(PHASES[rget(f_phase).raw])
                a_step(rget(f_step))
                a_task(rget(f_task))
                a_scheme(rget(f_scheme))
                a_rollout(rget(f_rollout))
                a_turn(rget(f_turn))
                a_evaluator(get(mf_evaluator))
                a_device(get(mf_device))
                a_size(get(mf_size))
                a_plan(plan.hex())
                a_compiled(get(mf_compiled))
                a_correct(get(mf_correct))
                a_decoy(get(mf_decoy))
                a_speedup(get(mf_speedup))
                a_kernel(get(mf_kernel))
                a_reference(get(mf_reference))
                a_statistic(get(mf_statistic))
                a_coverage(get(mf_coverage))
                a_error(get(mf_error))
                a_flags(_joined(get(f_flags)))
                a_ntrials(len(ts))
                a_nkernel(len(kt))
                a_nreference(len(rt))
                if objects:
                    if _is_address(plan):
                        addresses.add(plan)
                    log = get(f_log)
                    if _is_address(log):
                        addresses.add(log)
                for t in ts:
                    tget = t._get_by_field
                    at_correct(tget(tf_correct))
                    at_max(tget(tf_max))
                    at_mean(tget(tf_mean))
                    at_dist(tget(tf_dist))
                    at_seed(tget(tf_seed))
                times.extend(kt)
                times.extend(rt)
                if only_measurements:
                    continue
                key = (meas["phase"][-1], meas["step"][-1], meas["task"][-1], meas["scheme"][-1],
                       meas["rollout"][-1], meas["turn"][-1])
                sample = pending_sample.pop(key, None)
                turn_at[key] = len(turn_reward)
                turn_reward.append(None)
                turn_adv.append(None)
                turn_ret.append(None)
                turn_logp.append(sample)
                continue
            if only_measurements:
                continue
            if objects and kind in addr_fields:
                ufield, afields = addr_fields[kind]
                body = r._get_by_field(ufield)
                for f in afields:
                    a = body._get_by_field(f)
                    if _is_address(a):
                        addresses.add(a)
                if kind == "selection":
                    for c in body.candidates:
                        if _is_address(c.skill):
                            addresses.add(c.skill)
            if kind == "reward" or kind == "advantage" or kind == "sample":
                body = r._get_by_field(union[kind])
                if kind == "reward":
                    value, rkind = [body._get_by_field(f) for f in rw_fields]
                    if rkind.raw != 0:  # turn rewards only
                        continue
                elif kind == "advantage":
                    role, value, ret = [body._get_by_field(f) for f in adv_fields]
                    if role.raw != 1:  # policy advantages only
                        continue
                else:
                    role, logp = [body._get_by_field(f) for f in smp_fields]
                    if role.raw != 1:
                        continue
                key = (PHASES[r._get_by_field(f_phase).raw], r._get_by_field(f_step),
                       r._get_by_field(f_task), r._get_by_field(f_scheme),
                       r._get_by_field(f_rollout), r._get_by_field(f_turn))
                if kind == "sample":
                    pending_sample[key] = logp
                    continue
                i = turn_at.get(key)
                if i is None:
                    continue
                if kind == "reward":
                    turn_reward[i] = value
                else:
                    turn_adv[i] = value
                    turn_ret[i] = ret
            elif kind == "metric":
                body = r._get_by_field(union["metric"])
                met["seq"].append(seq)
                met["phase"].append(PHASES[r._get_by_field(f_phase).raw])
                met["step"].append(r._get_by_field(f_step))
                for col, f in zip(mtcols, met_fields):
                    col.append(body._get_by_field(f))
            elif kind == "selection":
                b = r.selection
                cands = list(b.candidates)
                selections.append((r.seq, PHASES[r.phase.raw], r.step, r.task, task_level(r.task),
                                   r.scheme, b.sampleIndex, list(b.selected),
                                   [c.name for c in cands], [c.score for c in cands],
                                   b.randomFallback, b.reranked, b.query.hex(),
                                   b.librarySnapshot.hex()))
            elif kind == "verification":
                b = r.verification
                verifications.append((r.seq, PHASES[r.phase.raw], r.step, r.task, r.scheme,
                                      r.rollout, b.sampleIndex, b.skillName, b.skill.hex(),
                                      list(b.speedups), list(b.correct), b.baselineTurn1Speedup,
                                      b.accepted, b.staged, b.reason))
            elif kind == "librarySnapshot":
                b = r.librarySnapshot
                library.append((r.seq, PHASES[r.phase.raw], r.step, b.forStep, b.snapshot.hex(),
                                b.size, list(b.added)))
        self._record_count = count
        if objects:
            for a in sorted(addresses):
                self.store.get(a)

        # The measurement tables: columns as arrays; trials and timing samples take their
        # measurement's position by repetition.
        n_trials, n_kernel, n_reference = meas["n_trials"], meas["n_kernel"], meas["n_reference"]
        n = len(meas["seq"])
        cat = pd.Categorical
        measurements = pd.DataFrame({
            "seq": np.array(meas["seq"], dtype=np.int64),
            "phase": cat(meas["phase"], categories=PHASES),
            "step": np.array(meas["step"], dtype=np.int32),
            "task": cat(meas["task"]),
            "level": np.array([task_level(t) for t in meas["task"]], dtype=np.int32),
            "scheme": np.array(meas["scheme"], dtype=np.int32),
            "rollout": np.array(meas["rollout"], dtype=np.int32),
            "turn": np.array(meas["turn"], dtype=np.int32),
            "evaluator": cat(meas["evaluator"]), "device": cat(meas["device"]),
            "size": cat(meas["size"]),
            "plan": meas["plan"],
            "compiled": np.array(meas["compiled"], dtype=bool),
            "correct": np.array(meas["correct"], dtype=bool),
            "decoy": np.array(meas["decoy"], dtype=bool),
            "speedup": np.array(meas["speedup"], dtype=np.float64),
            "kernel_us": np.array(meas["kernelUs"], dtype=np.float64),
            "reference_us": np.array(meas["referenceUs"], dtype=np.float64),
            "statistic": cat(meas["statistic"]),
            "time_coverage": np.array(meas["timeCoverage"], dtype=np.float64),
            "error": meas["error"], "flags": meas["flags"],
            "trials": np.array(n_trials, dtype=np.int32),
            "kernel_samples": np.array(n_kernel, dtype=np.int32),
            "reference_samples": np.array(n_reference, dtype=np.int32),
        }, index=pd.RangeIndex(n))
        # Trials and timing samples name their measurement by seq (merge on it for the rest of
        # the position): millions of rows, so no repeated columns.
        seq_arr = measurements["seq"].to_numpy()
        trials = pd.DataFrame({
            "seq": np.repeat(seq_arr, np.array(n_trials, dtype=np.int64)), "trial": _ranks(n_trials),
            "correct": np.array(tcols[0], dtype=bool),
            "max_abs_err": np.array(tcols[1], dtype=np.float64),
            "mean_abs_err": np.array(tcols[2], dtype=np.float64),
            "distribution": cat(tcols[3]),
            "seed": np.array(tcols[4], dtype=np.uint64)})
        groups = np.empty(2 * n, dtype=np.int64)
        groups[0::2] = n_kernel
        groups[1::2] = n_reference
        timings = pd.DataFrame({
            "seq": np.repeat(seq_arr, groups[0::2] + groups[1::2]),
            "side": pd.Categorical.from_codes(
                np.repeat(np.tile(np.array([0, 1], dtype=np.int8), n), groups), ["kernel", "reference"]),
            "sample": _ranks(groups),
            "time_us": np.array(times, dtype=np.float64)})
        tables = {"measurements": measurements, "trials": trials, "timings": timings}
        if only_measurements:
            self._measurement_tables = tables
            return
        turns = measurements[["phase", "step", "task", "level", "scheme", "rollout", "turn", "seq",
                              "compiled", "correct", "decoy", "speedup", "time_coverage", "plan"]].copy()
        turns["reward"] = np.array(turn_reward, dtype=np.float64)
        turns["advantage"] = np.array(turn_adv, dtype=np.float64)
        turns["return"] = np.array(turn_ret, dtype=np.float64)
        turns["log_prob"] = np.array(turn_logp, dtype=np.float64)
        tables.update({
            "turns": turns,
            "rollouts": _rollouts(turns),
            "selections": pd.DataFrame(selections, columns=[
                "seq", "phase", "step", "task", "level", "scheme", "sample_index", "selected",
                "candidates", "scores", "random_fallback", "reranked", "query", "library_snapshot"]),
            "verifications": pd.DataFrame(verifications, columns=[
                "seq", "phase", "step", "task", "scheme", "rollout", "sample_index", "skill_name",
                "skill", "speedups", "correct", "baseline_turn1_speedup", "accepted", "staged",
                "reason"]),
            "library": pd.DataFrame(library, columns=[
                "seq", "phase", "step", "for_step", "snapshot", "size", "added"]),
            "skills": self._skills(library),
            "metrics": pd.DataFrame(met).rename(columns=_SNAKE),
        })
        tables["fast_p"] = _fast_p_table(measurements, self._thresholds(None), self._inclusive(None))
        self._tables = tables
        self._measurement_tables = {k: tables[k] for k in ("measurements", "trials", "timings")}

    def _skills(self, library):
        import json
        rows = []
        parsed = {}
        for seq, _, _, for_step, snapshot, size, added in library:
            if snapshot not in parsed:
                kind, data = self.store.get(snapshot)
                lines = data.decode().split("\n")
                skills = []
                for i, line in enumerate(lines[1:], start=2):
                    if not line:
                        continue
                    try:
                        skills.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise DamagedRunError(f"{self.store.path(snapshot)}: library line {i}: "
                                              f"not JSON: {e}") from None
                parsed[snapshot] = skills
            added_set = set(added)
            for sk in parsed[snapshot]:
                meta = sk.get("vinci", {}) or {}
                rows.append((seq, for_step, snapshot, sk.get("name", ""), sk.get("description", ""),
                             sk.get("scope", ""), list(sk.get("tags", [])), meta.get("family", ""),
                             meta.get("source", ""), len(sk.get("content", "")),
                             sk.get("name", "") in added_set))
        return pd.DataFrame(rows, columns=[
            "library_seq", "for_step", "snapshot", "name", "description", "scope", "tags",
            "family", "source", "content_chars", "added"])


def _is_address(a):
    """An object's address: present and not the zero address, which stands for "none" (a turn
    without a kernel has no plan)."""
    return bool(a) and any(bytes(a))


def _struct_of(kind):
    return {"sample": "BackboneSample", "measurement": "Measurement", "llmReply": "LlmReply",
            "selection": "SelectionDecision", "librarySnapshot": "LibrarySnapshot",
            "parameterDigest": "ParameterDigest", "verification": "VerificationDecision",
            "stepBegin": "StepBegin", "blob": "BlobRef", "checkpoint": "CheckpointRef",
            "coldStart": "ColdStartSummary", "modelUpdate": "ModelUpdate"}[kind]


_SNAKE = {"kernelUs": "kernel_us", "referenceUs": "reference_us", "timeCoverage": "time_coverage",
          "turnMode": "turn_mode"}


def _rollouts(turns):
    keys = ["phase", "step", "task", "level", "scheme", "rollout"]
    if turns.empty:
        return pd.DataFrame(columns=keys + ["turns", "correct_turns", "best_speedup",
                                            "last_speedup", "reward_sum", "first_seq"])
    t = turns.assign(ok=turns["compiled"] & turns["correct"] & ~turns["decoy"])
    t["ok_speedup"] = t["speedup"].where(t["ok"], 0.0)
    g = t.groupby(keys, sort=False)
    out = g.agg(turns=("turn", "size"), correct_turns=("ok", "sum"),
                best_speedup=("ok_speedup", "max"), last_speedup=("speedup", "last"),
                reward_sum=("reward", "sum"), first_seq=("seq", "min")).reset_index()
    return out.sort_values("first_seq", kind="stable").reset_index(drop=True)


def _fast_p_table(measurements, thresholds, inclusive):
    """replay score's fast_p (harness/rl.cc) for every evaluation step and the tts pass."""
    cols = ["phase", "step", "turn_mode", "denominator", "level", "threshold", "value",
            "numerator", "count"]
    m = measurements
    # (phase, step) -> {task: [(compiled, correct, decoy, speedup), ...]} in log order.
    points = {}
    for phase, step, task, comp, corr, decoy, sp in zip(
            m["phase"].tolist(), m["step"].tolist(), m["task"].tolist(), m["compiled"].tolist(),
            m["correct"].tolist(), m["decoy"].tolist(), m["speedup"].tolist()):
        if phase == "eval" or phase == "tts":
            points.setdefault((phase, step), {}).setdefault(task, []).append((comp, corr, decoy, sp))
    eval_steps = [st for ph, st in points if ph == "eval"]
    final_eval = max(eval_steps) if eval_steps else 0
    rows = []
    for (phase, step) in sorted(points):
        tasks = [(task_level(t), o) for t, o in points[(phase, step)].items()]
        levels = sorted({lv for lv, _ in tasks}) + [0]
        out_step = final_eval if phase == "tts" else step
        for mode in ("last", "best"):
            picked = [(lv, _pick(o, mode)) for lv, o in tasks]
            for denom in ("all", "correct"):
                for level in levels:
                    for p in thresholds:
                        num = cnt = 0
                        for lv, (comp, corr, decoy, sp) in picked:
                            if level and lv != level:
                                continue
                            ok = comp and corr and not decoy
                            if denom == "all" or ok:
                                cnt += 1
                            if ok and (sp >= p if inclusive else sp > p):
                                num += 1
                        rows.append((phase, int(out_step), mode, denom, level, float(p),
                                     num / cnt if cnt else 0.0, num, cnt))
    return pd.DataFrame(rows, columns=cols)


def _joined(texts):
    return ",".join(texts) if len(texts) else ""


def _ranks(counts):
    """0..c-1 for each count c, concatenated."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int32)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return (np.arange(total) - starts).astype(np.int32)


def _pick(outcomes, mode):
    if not outcomes:
        return (False, False, False, 0.0)
    if mode == "last":
        return outcomes[-1]
    best = None
    for o in outcomes:
        if o[0] and o[1] and not o[2] and (best is None or o[3] > best[3]):
            best = o
    return best if best is not None else outcomes[-1]

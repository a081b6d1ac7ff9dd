"""vinci.open_run: a recorded run as a manifest, an iterator of records and pandas DataFrames."""
import os
import struct
import tomllib

import pandas as pd
import xxhash

from . import _format
from ._format import DamagedRunError, RunError

PHASES = ("train", "eval", "verify", "coldstart", "tts")
ROLES = ("selection", "policy", "summary")
REWARD_KINDS = ("turn", "scheme", "summary")
_U64 = struct.Struct("<Q")

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
        self.store = _format.ObjectStore(os.path.join(os.path.dirname(self.path), "objects"))
        self._tables = None
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
        pack = _U64.pack
        for path, frames in _format.iter_segments(os.path.join(self.path, "log")):
            pieces = []
            for payload in frames:
                pieces.append(pack(len(payload)))
                pieces.append(payload)
            digest.update(b"".join(pieces))
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
        parse = self.schema.Record.from_bytes_packed
        for seq, payload in enumerate(self.payloads()):
            try:
                r = parse(payload)
            except Exception as e:
                raise DamagedRunError(f"{self.path}: record {seq}: not a packed Record: {e}") from None
            if r.seq != seq:
                raise DamagedRunError(f"{self.path}: record {seq}: its seq field is {r.seq}")
            if kinds is not None and r._which_str() not in kinds:
                continue
            if phase is not None and PHASES[r.phase.raw] != phase:
                continue
            yield r

    def object(self, address):
        """(kind, bytes) of an object the run names, its address checked."""
        return self.store.get(address)

    def verify(self, objects=True):
        """Reads the whole log (checksums, count, digest) and, with `objects`, every object a record
        names (present, readable, hashing to its address). Returns the number of records; raises
        DamagedRunError on damage."""
        self._scan(objects=objects)
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

    def measurements(self):
        """One row per measurement record (every phase)."""
        return self.table("measurements")

    def trials(self):
        """One row per correctness trial of every measurement."""
        return self.table("trials")

    def timings(self):
        """One row per timing sample (kernel and reference) of every measurement."""
        return self.table("timings")

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

    def _scan(self, objects):
        s = self.schema
        R = s.Record
        rf = dict(zip(("seq", "step", "task", "scheme", "rollout", "turn", "phase"),
                      _fields(R, ("seq", "step", "task", "scheme", "rollout", "turn", "phase"))))
        f_seq, f_step, f_task, f_scheme, f_rollout, f_turn, f_phase = rf.values()
        union = {name: R.schema.fields[name] for name in R.schema.union_fields}
        m_names = ("evaluator", "device", "size", "plan", "compiled", "correct", "decoy", "speedup",
                   "kernelUs", "referenceUs", "statistic", "timeCoverage", "error")
        m_fields = _fields(s.Measurement, m_names)
        f_trials, f_ktimes, f_rtimes, f_flags = _fields(
            s.Measurement, ("trials", "kernelTimesUs", "referenceTimesUs", "flags"))
        t_fields = _fields(s.Trial, ("correct", "maxAbsErr", "meanAbsErr", "distribution", "seed"))
        rw_fields = _fields(s.Reward, ("value", "kind", "speedup", "sampleIndex"))
        adv_fields = _fields(s.Advantage, ("role", "value", "returnValue", "baseline", "sampleIndex"))
        smp_fields = _fields(s.BackboneSample, ("role", "logProb", "output"))
        met_names = ("name", "split", "level", "threshold", "turnMode", "denominator", "value",
                     "numerator", "count")
        met_fields = _fields(s.Metric, met_names)
        addr_fields = {k: (union[k], _fields(getattr(s, _struct_of(k)), v))
                       for k, v in _ADDRESS_FIELDS.items()}

        meas = {k: [] for k in ("seq", "phase", "step", "task", "level", "scheme", "rollout", "turn")
                + m_names + ("flags", "trials", "kernel_samples", "reference_samples")}
        mcols = [meas[k] for k in m_names]
        trials = {k: [] for k in ("seq", "phase", "step", "task", "scheme", "rollout", "turn",
                                  "trial", "correct", "max_abs_err", "mean_abs_err", "distribution",
                                  "seed")}
        tcols = [trials[k] for k in ("correct", "max_abs_err", "mean_abs_err", "distribution", "seed")]
        tim = {k: [] for k in ("seq", "phase", "step", "task", "scheme", "rollout", "turn", "side",
                               "sample", "time_us")}
        # turns: one per measurement; reward, advantage and policy sample joined by position.
        turn_rows = []
        turn_at = {}  # position -> index of its latest turn row
        pending_sample = {}  # position -> (log_prob, output) of the policy sample before it
        selections, verifications, library, metrics = [], [], [], []
        met = {k: [] for k in ("seq", "phase", "step") + met_names}
        mtcols = [met[k] for k in met_names]
        addresses = set()
        count = 0
        for r in self.records():
            count += 1
            kind = r._which_str()
            if objects and kind in addr_fields:
                ufield, afields = addr_fields[kind]
                body = r._get_by_field(ufield)
                for f in afields:
                    a = body._get_by_field(f)
                    if a:
                        addresses.add(a)
                if kind == "selection":
                    for c in body.candidates:
                        if c.skill:
                            addresses.add(c.skill)
            if kind == "measurement":
                seq = r._get_by_field(f_seq)
                phase = PHASES[r._get_by_field(f_phase).raw]
                step = r._get_by_field(f_step)
                task = r._get_by_field(f_task)
                scheme = r._get_by_field(f_scheme)
                rollout = r._get_by_field(f_rollout)
                turn = r._get_by_field(f_turn)
                m = r._get_by_field(union["measurement"])
                vals = [m._get_by_field(f) for f in m_fields]
                vals[3] = vals[3].hex()
                for col, v in zip(mcols, vals):
                    col.append(v)
                ts = m._get_by_field(f_trials)
                kt = list(m._get_by_field(f_ktimes))
                rt = list(m._get_by_field(f_rtimes))
                meas["seq"].append(seq)
                meas["phase"].append(phase)
                meas["step"].append(step)
                meas["task"].append(task)
                meas["level"].append(task_level(task))
                meas["scheme"].append(scheme)
                meas["rollout"].append(rollout)
                meas["turn"].append(turn)
                meas["flags"].append(",".join(m._get_by_field(f_flags)))
                meas["trials"].append(len(ts))
                meas["kernel_samples"].append(len(kt))
                meas["reference_samples"].append(len(rt))
                n = 0
                for t in ts:
                    for col, f in zip(tcols, t_fields):
                        col.append(t._get_by_field(f))
                    n += 1
                if n:
                    trials["trial"].extend(range(n))
                    for k, v in (("seq", seq), ("phase", phase), ("step", step), ("task", task),
                                 ("scheme", scheme), ("rollout", rollout), ("turn", turn)):
                        trials[k].extend([v] * n)
                n = len(kt) + len(rt)
                if n:
                    tim["side"].extend(["kernel"] * len(kt) + ["reference"] * len(rt))
                    tim["sample"].extend(list(range(len(kt))) + list(range(len(rt))))
                    tim["time_us"].extend(kt + rt)
                    for k, v in (("seq", seq), ("phase", phase), ("step", step), ("task", task),
                                 ("scheme", scheme), ("rollout", rollout), ("turn", turn)):
                        tim[k].extend([v] * n)
                pos = (phase, step, task, scheme, rollout, turn)
                sample = pending_sample.pop(pos, (None, None))
                turn_at[pos] = len(turn_rows)
                turn_rows.append([phase, step, task, task_level(task), scheme, rollout, turn, seq,
                                  vals[4], vals[5], vals[6], vals[7], vals[11], vals[3],
                                  None, None, None, sample[0]])
            elif kind == "reward" or kind == "advantage" or kind == "sample":
                body = r._get_by_field(union[kind])
                if kind == "reward":
                    value, rkind, _, _ = [body._get_by_field(f) for f in rw_fields]
                    if rkind.raw != 0:
                        continue
                elif kind == "advantage":
                    role, value, ret, _, _ = [body._get_by_field(f) for f in adv_fields]
                    if role.raw != 1:
                        continue
                else:
                    role, logp, out = [body._get_by_field(f) for f in smp_fields]
                    if role.raw != 1:
                        continue
                pos = (PHASES[r._get_by_field(f_phase).raw], r._get_by_field(f_step),
                       r._get_by_field(f_task), r._get_by_field(f_scheme),
                       r._get_by_field(f_rollout), r._get_by_field(f_turn))
                if kind == "sample":
                    pending_sample[pos] = (logp, out)
                    continue
                i = turn_at.get(pos)
                if i is None:
                    continue
                if kind == "reward":
                    turn_rows[i][14] = value
                else:
                    turn_rows[i][15] = value
                    turn_rows[i][16] = ret
            elif kind == "metric":
                body = r._get_by_field(union["metric"])
                met["seq"].append(r._get_by_field(f_seq))
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
        for p in pending_sample:
            pass  # a policy sample with no measurement (a reply without a plan is measured too)
        measurements = pd.DataFrame(meas)
        turns = pd.DataFrame(turn_rows, columns=[
            "phase", "step", "task", "level", "scheme", "rollout", "turn", "seq", "compiled",
            "correct", "decoy", "speedup", "time_coverage", "plan", "reward", "advantage",
            "return", "log_prob"])
        turns = turns.astype({"reward": "float64", "advantage": "float64", "return": "float64",
                              "log_prob": "float64"})
        self._tables = {
            "measurements": measurements.rename(columns=_SNAKE),
            "trials": pd.DataFrame(trials).astype({"seed": "uint64"}),
            "timings": pd.DataFrame(tim),
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
        }
        self._tables["fast_p"] = _fast_p_table(self._tables["measurements"], self._thresholds(None),
                                               self._inclusive(None))

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


def _struct_of(kind):
    return {"sample": "BackboneSample", "measurement": "Measurement", "llmReply": "LlmReply",
            "selection": "SelectionDecision", "librarySnapshot": "LibrarySnapshot",
            "parameterDigest": "ParameterDigest", "verification": "VerificationDecision",
            "stepBegin": "StepBegin", "blob": "BlobRef", "checkpoint": "CheckpointRef",
            "coldStart": "ColdStartSummary"}[kind]


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
    rows = []
    m = measurements[measurements["phase"].isin(["eval", "tts"])]
    if m.empty:
        return pd.DataFrame(rows, columns=cols)
    final_eval = m.loc[m["phase"] == "eval", "step"].max() if (m["phase"] == "eval").any() else 0
    for (phase, step), group in m.groupby(["phase", "step"], sort=True):
        # Per task, its turns in log order (the groups keep the first-seen task order).
        tasks = []
        for task, tg in group.groupby("task", sort=False):
            outcomes = list(zip(tg["compiled"], tg["correct"], tg["decoy"], tg["speedup"]))
            tasks.append((task_level(task), outcomes))
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

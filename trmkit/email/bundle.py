"""A trained e-mail classifier as one folder: export, load, predict.

    BUNDLE/
      model.safetensors   evaluation weights (EMA) and buffers
      config.json         the model config, seq_len, tail, pad id, the store's build settings
      tokenizer.json      the `tokenizers` tokenizer trained on the training split
      labels.json         class names, in label-id order
      calibration.json    the temperature fitted on validation, ECE before/after on test
      model_card.md       what it is, the data, the measured test metrics (from classification.json)

Loading reads JSON and safetensors only: nothing is ever unpickled. `Classifier` loads a bundle
or a run directory (the same files, read from where `trmkit train` left them: the run's names
come from trmkit.rundir, its weights load through rundir.load_weights) and classifies
`Message`s in batches, halting each message when its halting head says so (ACT), as trained.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.data.store import META_FILE
from trmkit.email import halting
from trmkit.email.outputs import without_machine_paths
from trmkit.email.bag import BAG_FILE, Bag
from trmkit.email.mail import Message
from trmkit.email.parts import model_of, settings_of
from trmkit.email.task import NAME
from trmkit.email.tokenizer import TOKENIZER_FILE
from trmkit.email.encode import encode_messages
from trmkit.files import atomic_write, commit_dir, temp_sibling
from trmkit.model.trm import TRM
from trmkit.names import current_names
from trmkit.tasks.classify.metrics import stablemax_probs

# The bundle's own file names (a bundle is not a run directory: see the module docstring).
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
LABELS_FILE = "labels.json"
CALIBRATION_FILE = "calibration.json"
MODEL_CARD_FILE = "model_card.md"
FILES = (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, LABELS_FILE, CALIBRATION_FILE, MODEL_CARD_FILE)
FORMAT = "trmkit-email-bundle/1"
NO_WEIGHTS = "train the run to the end first (`trmkit train`)"
NOT_EMAIL = ("an e-mail run or bundle: give a run trained on `trmkit data email` (or its bundle, `trmkit email export "
             "RUN --out BUNDLE`); `trmkit predict RUN INPUTS` answers with other runs")
_COPY_CHUNK = 1 << 20
UNCERTAIN = "uncertain"  # the label of a prediction under its class's threshold
DTYPE_PROBE_ROWS = 32  # messages the dtype measurement runs (twice per dtype): a cheap, representative slice


@dataclass
class Calibration:
    temperature: float = 1.0
    ece_before: float | None = None  # on test, at T = 1
    ece_after: float | None = None  # on test, at the fitted T
    fitted_on: str = "none"  # "val" when fitted
    halt_probability: float | None = None  # a sure answer stops its message early (halting.py)
    halt_fitted_on: str = "not fitted"


def calibrate(run_dir: Path) -> Calibration:
    """The run's calibration.json (written at the end of training), fitted again if it is missing."""
    from trmkit.tasks.classify.scorer import calibrate as fit

    path = rundir.path(run_dir, rundir.CLASSIFICATION)
    if not path.is_file():
        raise ConfigError(f"{path} not found: train the run to the end (its last evaluation writes it)")
    fitted = rundir.path(run_dir, rundir.CALIBRATION)
    cal = json.loads(fitted.read_text()) if fitted.is_file() else fit(run_dir)
    return Calibration(**{k: cal.get(k) for k in ("temperature", "ece_before", "ece_after", "fitted_on")})


def run_files(run_dir: Path) -> tuple[dict, Path, dict]:
    """(the run's config.yaml, its store's train/ folder, that folder's meta.json)."""
    import yaml

    config = rundir.path(run_dir, rundir.CONFIG)
    cfg = reading(config, lambda p: yaml.safe_load(p.read_text()))
    if not isinstance(cfg, dict) or not isinstance(cfg.get("data"), dict) or "path" not in cfg["data"]:
        raise _Unreadable(config, "it names no data.path")
    train = Path(cfg["data"]["path"]) / "train"
    if not (train / META_FILE).is_file():
        raise ConfigError(f"{train / META_FILE} not found: {run_dir} was trained on the store {train.parent}, "
                          "which is gone or moved; build it again with `trmkit data email` (or copy it back)")
    return cfg, train, read_json(train / META_FILE)


def export(run_dir: str | Path, out: str | Path, log=print) -> Path:
    """Write BUNDLE from a finished run; atomic (a hidden sibling renamed into place)."""
    run_dir, out = Path(run_dir), Path(out)
    rundir.check_task(run_dir, NAME, NOT_EMAIL)
    with damaged("the run's files come from `trmkit train`, its store's from `trmkit data email`: rebuild the "
                 "damaged one"):
        cfg, train, meta = run_files(run_dir)
        for name in (rundir.CLASSIFICATION, rundir.CALIBRATION):  # read below by calibrate and the model card
            if rundir.path(run_dir, name).is_file():
                read_json(rundir.path(run_dir, name))
    if meta.get("task") != NAME or not meta.get("classes"):
        raise ConfigError(f"{run_dir}: trained on a {meta.get('task')!r} store; export takes an e-mail run")
    weights = rundir.path(run_dir, rundir.WEIGHTS)
    if not weights.is_file():
        raise ConfigError(f"{weights} not found: {NO_WEIGHTS}")
    cal = calibrate(run_dir)
    log(f"calibration: temperature {cal.temperature:.3f} (fitted on {cal.fitted_on}); test ECE "
        f"{cal.ece_before:.4f} -> {cal.ece_after if cal.ece_after is not None else float('nan'):.4f}")
    if out.exists() and not (out / CONFIG_FILE).is_file():
        raise FileExistsError(f"{out} exists and is not a bundle; choose another --out or remove it")
    config = {"format": FORMAT, "model": cfg["model"], "email": cfg.get("email", {}), "seq_len": text_len(meta),
              "tail": meta["build"].get("tail", 0), "pad_id": meta["pad_id"],
              "build": without_machine_paths(meta["build"])}
    start = time.perf_counter()
    log(f"export: 1/3 loading the model and fitting when a sure answer stops a message early (up to "
        f"{halting.FIT_MESSAGES} held-out messages, every supervision step)")
    clf = Classifier.load(run_dir, dtype="float32")
    cal.halt_probability, cal.halt_fitted_on = clf.halt_probability, portable(clf.halt_fitted_on, train.parent)
    log(f"halting: {halting.describe(clf.halt_probability, clf.halt_fitted_on)}")
    log(f"export: 2/3 the test split as `email predict` runs it, for the card ({time.perf_counter() - start:.0f} s)")
    as_run = measure_as_predict_runs(clf, train.parent, meta["classes"], log)
    log(f"export: 3/3 writing the bundle ({time.perf_counter() - start:.0f} s so far)")
    texts = {CONFIG_FILE: json.dumps(config, indent=2, default=str), LABELS_FILE: json.dumps(meta["classes"]),
             CALIBRATION_FILE: json.dumps(asdict(cal), indent=2),
             MODEL_CARD_FILE: model_card(run_dir, cfg, meta, cal, as_run)}
    copies = {MODEL_FILE: weights, TOKENIZER_FILE: train / TOKENIZER_FILE}
    if (train / BAG_FILE).is_file():
        copies[BAG_FILE] = train / BAG_FILE
    write_bundle(out, copies, texts)
    return out


def text_len(meta: dict) -> int:
    """Token positions of a message in the store (its sequence, less the n-gram bag after it)."""
    return int(meta["seq_len"]) - bag_positions(meta)


def bag_positions(meta: dict) -> int:  # meta.json's part_positions (stores built before: under former names)
    return int(current_names(meta).get("part_positions", 0))


def reads(meta: dict) -> str:
    """What the model reads of a message, in words: "128 tokens", "32 tokens and a bag of 1024 n-grams"."""
    bag = bag_positions(meta)
    return f"{text_len(meta)} tokens" + (f" and a bag of {bag} n-grams" if bag else "")


def write_bundle(out: Path, copies: dict[str, Path], texts: dict[str, str]) -> None:
    """Build the folder in a hidden sibling (files copied or written, each fsync'd), then rename it
    over `out`: a reader sees the old bundle or the new one, never half of one."""
    tmp = temp_sibling(out)
    tmp.mkdir(parents=True)
    try:
        for name, source in copies.items():
            with open(source, "rb") as f:
                atomic_write(tmp / name, iter(lambda: f.read(_COPY_CHUNK), b""))
        for name, text in texts.items():
            atomic_write(tmp / name, text)
        commit_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def measure_as_predict_runs(clf: "Classifier", store: Path, classes: list[str], log=print) -> dict | None:
    """The test split classified the way `email predict` runs by default (halting as halting.py says,
    float32): the card's headline numbers are the ones a user gets."""
    from trmkit.email.task import MESSAGES_FILE
    from trmkit.tasks.classify.metrics import summary_metrics

    path = store / "test" / MESSAGES_FILE
    if not path.is_file():
        return None
    records = json.loads(path.read_text())
    preds = clf.predict([Message(subject=r["subject"], sender=r["sender"], body=r["body"]) for r in records])
    result = summary_metrics([classes.index(r["label"]) for r in records],
                             [classes.index(p["predicted"]) for p in preds], classes)
    result["steps_per_message"] = clf.steps_run / max(1, clf.messages_seen)
    log(f"model card: the test split as `email predict` runs it: macro-F1 {result['macro_f1']:.4f}, "
        f"{result['steps_per_message']:.2f} supervision steps per message")
    return result


def portable(text: str, store: Path) -> str:
    """`text` without this machine's path of the store: ".../sa3/val" -> "the store's val split"."""
    for root in dict.fromkeys((str(store), str(Path(store).resolve()))):
        text = re.sub(re.escape(root) + r"/(\w+)", r"the store's \1 split", text).replace(root, "the store")
    return text


def model_card(run_dir: Path, cfg: dict, meta: dict, cal: Calibration, as_run: dict | None = None) -> str:
    """Markdown: the model, its data, the test metrics as `email predict` gets them (halting), and
    as measured at the end of training (all N_sup steps)."""
    test = json.loads(rundir.path(run_dir, rundir.CLASSIFICATION).read_text())
    summary = test.get("summary", {})
    m, d, source = cfg["model"], meta["build"].get("dataset", {}), Path(str(meta["source"]))
    lines = [
        "# trmkit e-mail classifier", "",
        f"A Tiny Recursive Model (mixer {m['mixer']}, D={m['hidden_size']}, {m['L_layers']} layers, "
        f"T={m['H_cycles']}, n={m['L_cycles']}, N_sup={m['halt_max_steps']}) reading {reads(meta)} per message, "
        f"trained with trmkit on `{source.name if source.is_absolute() else source}`.", "",  # not this machine's path
        f"- classes: {', '.join(meta['classes'])}",
        f"- split: {meta['build'].get('split')} (seed {meta['build'].get('seed')}); sizes "
        f"{d.get('split_sizes', '?')}",
        f"- duplicates removed before the split: {d.get('duplicates', '?')}", "",
        "## Held-out test metrics", "",
    ]
    if as_run is not None:
        lines.append(f"- as `email predict` runs it (halting, float32): accuracy {as_run['accuracy']:.4f}, "
                     f"macro-F1 {as_run['macro_f1']:.4f}, {as_run['steps_per_message']:.2f} supervision steps "
                     f"per message of {m['halt_max_steps']}: "
                     + halting.describe(cal.halt_probability, cal.halt_fitted_on))
    lines += [
        f"- at the end of training (all {m['halt_max_steps']} steps): accuracy "
        f"{summary.get('accuracy', float('nan')):.4f}, macro-F1 {summary.get('macro_f1', float('nan')):.4f}",
        f"- expected calibration error {cal.ece_before:.4f} at T=1, "
        + (f"{cal.ece_after:.4f} at T={cal.temperature:.3f} (fitted on validation)" if cal.ece_after is not None
           else "no validation split to fit a temperature"), "",
        "| class | precision | recall | F1 | support |", "| --- | --- | --- | --- | --- |",
    ]
    for name, c in summary.get("per_class", {}).items():
        lines.append(f"| {name} | {c['precision']:.3f} | {c['recall']:.3f} | {c['f1']:.3f} | {c['support']} |")
    lines += ["", "Probabilities are the model's stable-max probabilities of logits / temperature.", ""]
    return "\n".join(lines)


class DamagedFileError(ConfigError):
    """A file of a bundle, run or store exists but cannot be read as what it should be."""


@contextlib.contextmanager
def damaged(fix: str):
    """Turn a failure to read one of a model's files into an error that names the file and `fix`:
    every reader below raises through `reading`, which remembers the file being read."""
    try:
        yield
    except _Unreadable as err:
        raise DamagedFileError(f"{err.path} is damaged ({err.reason}); {fix}") from err.__cause__


class _Unreadable(Exception):
    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def reading(path: Path, read):
    """read(path), or _Unreadable naming `path` when its contents are not what they should be."""
    try:
        return read(path)
    except rundir.DamagedWeightsError as err:  # the fix is the bundle's or run's own: `damaged` adds it
        raise _Unreadable(err.path, err.reason) from err
    except (ConfigError, FileNotFoundError):
        raise
    except Exception as err:  # noqa: BLE001 - JSON, UTF-8, safetensors, tokenizers: all name the file
        raise _Unreadable(path, f"{type(err).__name__}: {str(err)[:200]}") from err


def read_json(path: Path):
    return reading(path, lambda p: json.loads(p.read_text(encoding="utf-8")))


def _bag(path: Path) -> Bag | None:
    return reading(path, Bag.load) if path.is_file() else None


class Classifier:
    """A loaded bundle (or run directory): classify messages in batches.

    Satisfies serve.Predictor: `class_names` and `predict(messages) -> list[dict]`."""

    def __init__(self, model: TRM, tokenizer, class_names: list[str], seq_len: int, tail: int,
                 temperature: float, batch_size: int = 64, halt: bool = True, dtype: str = "float32",
                 bag: Bag | None = None):
        self.model, self.tokenizer, self.class_names = model.eval(), tokenizer, class_names
        self.seq_len, self.tail, self.temperature = seq_len, tail, temperature
        self.batch_size, self.halt, self.bag = batch_size, halt, bag
        self.thresholds: dict[str, float] = {}  # class -> the probability below which it becomes "uncertain"
        self.steps_run = 0  # supervision steps computed, summed over messages (for the ACT saving)
        self.messages_seen = 0
        self.dtype = dtype  # "float32", "bfloat16" (autocast), or "auto": see choose_dtype
        self.log = None  # where choose_dtype reports its measurement
        self.native_bf16: bool | None = None  # the CPU's bf16 instructions (the caller's hardware probe)
        self.cache_dir: Path | None = None  # where a measured choice is kept per machine and model
        self.halt_probability: float | None = None  # a sure answer stops its message early (halting.py)
        self.halt_fitted_on = "not fitted"

    def choose_dtype(self, inputs: np.ndarray, log=None) -> str:
        """float32 at once on a CPU without native bf16 instructions (bf16 would be emulated, several
        times slower); elsewhere bf16 only where it measured at least 1.1x faster than float32 on a
        slice of a real batch with the same labels, measured once per machine and model and cached."""
        from trmkit.plan.cache import PREDICT_DTYPE_FILE, read_cache, write_cache

        if not self.native_bf16:
            self.dtype = "float32"
            if log is not None:
                log("predict: dtype=float32 (this CPU has no native bf16 instructions: bf16 would be emulated, "
                    "so it is not measured)")
            return self.dtype
        shape = {**asdict(self.model.cfg), **settings_of(self.model)}
        key = f"{torch.__version__}|{json.dumps(shape, sort_keys=True)}|{self.seq_len}"
        cached = read_cache(self.cache_dir, PREDICT_DTYPE_FILE).get(key)
        if cached in ("float32", "bfloat16"):
            self.dtype = cached
            if log is not None:
                log(f"predict: dtype={cached} (measured on this machine before; cache {self.cache_dir})")
            return self.dtype
        self.dtype = self.measure_dtype(inputs[:DTYPE_PROBE_ROWS], log)
        write_cache(self.cache_dir, PREDICT_DTYPE_FILE, key, self.dtype)
        return self.dtype

    def measure_dtype(self, inputs: np.ndarray, log=None) -> str:
        """float32 against bf16 on `inputs` (the measurement's steps are not counted as work)."""
        times, labels, counted = {}, {}, self.steps_run
        for dtype in ("float32", "bfloat16"):
            self.dtype = dtype
            self.logits(inputs)  # warm-up
            t0 = time.perf_counter()
            labels[dtype] = self.logits(inputs).argmax(1)
            times[dtype] = time.perf_counter() - t0
        self.steps_run = counted  # the measurement is not part of the mailbox's work
        agree = float((labels["float32"] == labels["bfloat16"]).mean())
        self.dtype = "bfloat16" if times["float32"] >= 1.1 * times["bfloat16"] and agree == 1.0 else "float32"
        if log is not None:
            log(f"predict: dtype={self.dtype} (a batch of {len(inputs)}: float32 {times['float32'] * 1e3:.0f} ms, "
                f"bf16 {times['bfloat16'] * 1e3:.0f} ms, labels agree on {agree:.0%}; bf16 kept only at >= 1.1x "
                "and full agreement)")
        return self.dtype

    @classmethod
    def load(cls, path: str | Path, **kwargs) -> "Classifier":
        """A bundle or a run directory; a damaged file is named with the way to rebuild it."""
        path = Path(path)
        if (path / CONFIG_FILE).is_file():
            with damaged(f"rebuild the bundle from its run: `trmkit email export RUN --out {path}`"):
                return cls._from_bundle(path, **kwargs)
        if rundir.path(path, rundir.CONFIG).is_file():
            with damaged(f"the run's files come from `trmkit train` (config.yaml, weights) and its store's from "
                         f"`trmkit data email` (tokenizer, meta.json): rebuild the damaged one, or train {path} "
                         "again"):
                return cls._from_run(path, **kwargs)
        raise ConfigError(f"{path}: neither a bundle ({CONFIG_FILE}) nor a run directory ({rundir.CONFIG}); "
                          "pass `trmkit email export RUN --out BUNDLE`'s folder or a finished run")

    @classmethod
    def _from_bundle(cls, path: Path, **kwargs) -> "Classifier":
        config = read_json(path / CONFIG_FILE)
        if not isinstance(config, dict) or config.get("format") != FORMAT or not {"model", "seq_len"} <= set(config):
            raise _Unreadable(path / CONFIG_FILE, f"it is not a {FORMAT} config (format, model, seq_len)")
        cal = read_json(path / CALIBRATION_FILE) if (path / CALIBRATION_FILE).is_file() else {}
        labels = read_json(path / LABELS_FILE)
        if not isinstance(labels, list) or not all(isinstance(c, str) for c in labels):
            raise _Unreadable(path / LABELS_FILE, "it is not a list of class names")
        clf = cls._build(config, path / MODEL_FILE, path / TOKENIZER_FILE, labels, config["seq_len"],
                         config.get("tail", 0), float(cal.get("temperature", 1.0)), bag=_bag(path / BAG_FILE),
                         **kwargs)
        if "halt_probability" in cal:
            clf.halt_probability, clf.halt_fitted_on = cal["halt_probability"], cal.get("halt_fitted_on", "?")
        else:
            clf.halt_fitted_on = ("a bundle exported before predict stopped sure answers early: export it again "
                                  "to fit the rule")
        return clf

    @classmethod
    def _from_run(cls, run_dir: Path, **kwargs) -> "Classifier":
        rundir.check_task(run_dir, NAME, NOT_EMAIL)
        cfg, train, meta = run_files(run_dir)
        fitted = rundir.path(run_dir, rundir.CALIBRATION)
        if not fitted.is_file() and rundir.path(run_dir, rundir.CLASSIFICATION).is_file():
            calibrate(run_dir)
        cal = read_json(fitted) if fitted.is_file() else {}
        clf = cls._build(cfg, rundir.path(run_dir, rundir.WEIGHTS), train / TOKENIZER_FILE, meta["classes"],
                         text_len(meta), meta["build"].get("tail", 0), float(cal.get("temperature", 1.0)),
                         bag=_bag(train / BAG_FILE), **kwargs)
        if clf.halt:  # --no-halt runs every step: nothing to fit
            clf.fit_halting(train.parent)
        return clf

    def fit_halting(self, store: Path) -> None:
        """halt_probability fitted on the store's first split of halting.FIT_SPLITS with rows, no labels read."""
        if self.model.cfg.halt_max_steps == 1:
            self.halt_fitted_on = "one supervision step per message: none to stop early"
            return
        for split in halting.FIT_SPLITS:
            path = store / split / "inputs.npy"
            if path.is_file():
                rows = reading(path, lambda p: np.load(p, mmap_mode="r"))[: halting.FIT_MESSAGES]
                break
        else:
            self.halt_fitted_on = f"{store} has no split to fit the rule on"
            return
        if len(rows) < halting.MIN_MESSAGES:
            self.halt_fitted_on = f"{len(rows)} messages in {path.parent} (under {halting.MIN_MESSAGES}): not fitted"
            return
        batches: list[list[np.ndarray]] = []  # per batch, each step's logits
        halt, counted, self.halt = self.halt, self.steps_run, False
        for start in range(0, len(rows), self.batch_size):
            batches.append([])
            self.logits(np.array(rows[start:start + self.batch_size]), every_step=batches[-1])
        self.halt, self.steps_run = halt, counted  # fitting is not part of the mailbox's work
        probs = [stablemax_probs(np.concatenate(step).astype(np.float64), self.temperature) for step in zip(*batches)]
        self.halt_probability = halting.fit_probability(probs)
        self.halt_fitted_on = f"the {len(rows)} messages of {path.parent}"

    @classmethod
    def _build(cls, config: dict, weights: Path, tokenizer: Path, classes: list[str], seq_len: int, tail: int,
               temperature: float, **kwargs) -> "Classifier":
        from trmkit.email.tokenizer import EmailTokenizer

        model = model_of(config["model"], config.get("email"))  # written before: under former names (parts.py)
        reading(weights, lambda p: rundir.load_weights(model, p, what=NO_WEIGHTS))
        if model.cfg.num_classes != len(classes):
            raise ConfigError(f"{weights}: the model has {model.cfg.num_classes} classes, labels list {len(classes)}")
        return cls(model, reading(tokenizer, EmailTokenizer.load), list(classes), seq_len, tail, temperature, **kwargs)

    @torch.inference_mode()
    def logits(self, inputs: np.ndarray, every_step: list | None = None) -> np.ndarray:
        """(n, C) class logits after the last supervision step each message takes.

        With halting on, a message stops at the first step whose halting logit is > 0 or whose top
        probability is at least halt_probability (halting.py), else at N_sup; off, every message runs
        all N_sup steps (as `eval`). every_step: a list that gets each step's (active, C) logits."""
        x = torch.from_numpy(np.asarray(inputs, dtype=np.int64))
        n, n_sup = x.shape[0], self.model.cfg.halt_max_steps
        carry = self.model.initial_carry(n)
        z_H, z_L = carry.z_H, carry.z_L
        pids = torch.zeros(n, dtype=torch.int64)
        out = torch.zeros(n, self.model.cfg.num_classes)
        active = torch.arange(n)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.dtype == "bfloat16"):
            embedded = self.model.embed_input(x, pids)  # once: no step changes it
        for step in range(1, n_sup + 1):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.dtype == "bfloat16"):
                z_H, z_L, logits, q = self.model(z_H, z_L, x, pids, embedded)
            q = q.float()
            self.steps_run += len(active)
            out[active] = logits[:, 0].float()
            if every_step is not None:
                every_step.append(out[active].numpy())
            if step == n_sup:
                break
            keep = self._goes_on(q, out[active])
            if not keep.any():
                break
            active, z_H, z_L, x, pids = active[keep], z_H[keep], z_L[keep], x[keep], pids[keep]
            embedded = embedded.rows(keep)
        return out.numpy()

    def _goes_on(self, q: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Which messages take another step: every one without halting; else those whose halting head
        says go on (q_halt <= 0) and whose top probability is under halt_probability."""
        if not self.halt:
            return torch.ones_like(q, dtype=torch.bool)
        keep = q <= 0
        if self.halt_probability is not None:
            top = stablemax_probs(logits.numpy().astype(np.float64), self.temperature).max(1)
            keep &= torch.from_numpy(top < self.halt_probability)
        return keep

    def encode(self, messages: list[Message]) -> np.ndarray:
        return encode_messages(self.tokenizer, self.bag, messages, self.seq_len, self.tail)

    def worker_setup(self) -> tuple:
        """What a worker process needs to encode as `encode` does (workers.Parsers)."""
        return self.tokenizer.to_json(), None if self.bag is None else self.bag.to_dict(), self.seq_len, self.tail

    def predict(self, messages: list[Message]) -> list[dict]:
        return self.predict_encoded(messages, self.encode(messages))

    def predict_encoded(self, messages: list[Message], encoded: np.ndarray) -> list[dict]:
        """Predictions for messages already encoded (`encode`), `batch_size` rows per model call."""
        results = []
        for start in range(0, len(messages), self.batch_size):
            chunk, inputs = messages[start:start + self.batch_size], encoded[start:start + self.batch_size]
            if self.dtype == "auto":
                self.choose_dtype(inputs, self.log)
            probs = stablemax_probs(self.logits(inputs).astype(np.float64), self.temperature)
            self.messages_seen += len(chunk)
            results += [self._result(m, p, start + i) for i, (m, p) in enumerate(zip(chunk, probs))]
        return results

    def _result(self, msg: Message, probs: np.ndarray, index: int) -> dict:
        """One prediction: where the message is (so it can be moved), every class's probability, and
        "uncertain" in place of a label whose probability is under its threshold (--threshold)."""
        top = np.argsort(-probs)[:3]
        best = self.class_names[top[0]]
        sure = probs[top[0]] >= self.thresholds.get(best, self.thresholds.get("*", 0.0))
        return {"id": msg.message_id or msg.where or f"message-{index}", "source": msg.where,
                "message_id": msg.message_id, "label": best if sure else UNCERTAIN,
                "predicted": best, "probability": round(float(probs[top[0]]), 6),
                "probabilities": {c: round(float(p), 6) for c, p in zip(self.class_names, probs)},
                "top3": [{"label": self.class_names[i], "probability": round(float(probs[i]), 6)} for i in top]}

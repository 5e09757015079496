"""One typed run configuration: dataclasses, YAML load and dump, key=value overrides.

The config flows one way: YAML -> overrides -> fields filled from the dataset's
metadata -> the planner's choices -> written to the run directory and into
every checkpoint. Each part of trmkit receives only its own section.
Unknown keys are errors that name the key and the closest valid one.

`Config` holds the generic sections (run, model, data, train) as fields. An application's or a task's own
section (rl: trmkit/rl/config.py; maze: trmkit/tasks/maze/config.py) is its package's dataclass, known by
registration: the loader is given trmkit/registry.py's SECTIONS (`load(..., apps=SECTIONS)`) and builds
it into `Config.sections`; the YAML and the overrides spell it as any other section (`rl.attempts=8`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from trmkit.names import MOVED, with_current_keys


class ConfigError(ValueError):
    """A config that cannot work; the message names the key and the fix."""


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
               "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


def parse_size(text: str | int, what: str = "memory size") -> int:
    """'6GB' -> 6e9, '6GiB' -> 6 * 2**30, '512MB' -> 512e6, '6g' -> 6 * 2**30 (docker's
    convention: a bare K/M/G/T is binary), '1073741824' -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise ConfigError(f"{what} {text!r}: write a number and a unit, e.g. 6GB, 6GiB or 512MB")
    value = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if value <= 0:
        raise ConfigError(f"{what} {text!r} must be positive")
    return value


@dataclass
class ModelConfig:
    """The TRM network and its recursion (paper notation in comments)."""

    hidden_size: int = 512  # D, width of every position's state
    num_heads: int = 8  # attention heads (mixer=attention only)
    L_layers: int = 2  # blocks in the one shared network
    H_cycles: int = 3  # T: recursion cycles per supervision step (T-1 without gradients)
    L_cycles: int = 6  # n: z_L updates per cycle
    halt_max_steps: int = 16  # N_sup: supervision steps per sample
    halt_exploration_prob: float = 0.1  # chance of a random minimum number of steps
    mixer: str = "mlp_t"  # "mlp_t" (SwiGLU over the sequence axis), "attention", or "conv" (3 x 3 over an H x W grid)
    expansion: float = 4.0  # SwiGLU width = expansion * 2/3 * D, rounded up to 256 (unless mlp_width)
    mlp_width: int = 0  # the channel SwiGLU's hidden width, set explicitly (0 = the expansion rule above)
    conv_dense: bool = False  # mixer=conv: a dense 3 x 3 convolution (D x D per tap) instead of depthwise
    grid_height: int = 0  # mixer=conv: the grid's rows, from the store's meta.json (seq_len = rows x columns)
    grid_width: int = 0  # mixer=conv: the grid's columns, from the store's meta.json
    puzzle_emb_len: int = 16  # learned prefix positions holding the puzzle embedding
    puzzle_emb_dim: int = 0  # values learned per puzzle, zero-padded to puzzle_emb_len * D (0 = all of them)
    rms_norm_eps: float = 1e-5  # epsilon of the weightless RMSNorm
    rope_theta: float = 10000.0  # rotary base (mixer=attention only)
    halt_loss_weight: float = 0.5  # total loss = token loss + w * halt loss
    vocab_size: int = 0  # filled from the dataset's meta.json
    seq_len: int = 0  # filled from the dataset's meta.json
    num_puzzle_ids: int = 0  # filled from the dataset's meta.json
    num_classes: int = 0  # a classify task's classes (meta.json): one label from the mean of z_H (0 = a token each)
    loss: str = "stablemax"  # the answer's distribution: "stablemax" (the paper's) or "softmax" (model/losses.py)
    part_positions: int = 0  # the input's last positions, read by the task's model part instead of the mixer
    #                          (model/parts.py; e-mail's bag of n-grams), from the store's meta.json
    answer_vocab: int = 0  # a token head answers with the vocabulary's first N ids only (meta.json; 0 = all)
    trace_answers: str = ""  # data.trace sets it: the answer id each extra output stands for ("2,2,5,5")

    @property
    def network_positions(self) -> int:
        """S: positions the network sees: the puzzle prefix and the sequence, less the part's positions."""
        return self.puzzle_emb_len + self.seq_len - self.part_positions

    def __post_init__(self) -> None:
        self._check_mixer()
        for name in ("hidden_size", "L_layers", "H_cycles", "L_cycles", "halt_max_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.puzzle_emb_dim <= self.puzzle_emb_len * self.hidden_size:
            raise ConfigError(f"model.puzzle_emb_dim={self.puzzle_emb_dim} must be in [0, puzzle_emb_len * "
                              f"hidden_size = {self.puzzle_emb_len * self.hidden_size}] (0 = all of them)")
        if not 0.0 <= self.halt_exploration_prob <= 1.0:
            raise ConfigError("model.halt_exploration_prob must be in [0, 1]")
        if self.num_classes < 0 or self.num_classes == 1:
            raise ConfigError(f"model.num_classes={self.num_classes}: a classifier needs at least 2 classes "
                              "(0 = a grid task's token head)")
        self._check_outputs()
        if self.mlp_width < 0:
            raise ConfigError(f"model.mlp_width={self.mlp_width}: give a width >= 1, or 0 for the expansion rule")

    @property
    def trace_ids(self) -> tuple[int, ...]:
        """model.trace_answers as ints: the answer id of each output past the answer vocabulary."""
        return tuple(int(v) for v in self.trace_answers.split(",") if v.strip())

    def _check_outputs(self) -> None:
        ids = self.trace_answers.replace(",", " ").split()
        if (self.trace_answers and self.num_classes) or not all(v.isdigit() and (
                int(v) < (self.answer_vocab or self.vocab_size) or not self.vocab_size) for v in ids):
            raise ConfigError(f"model.trace_answers={self.trace_answers!r}: answer ids of a token head, comma "
                              "separated; the task sets them with data.trace (leave it empty otherwise)")
        if self.answer_vocab and (self.num_classes or self.answer_vocab > self.vocab_size > 0):
            raise ConfigError(f"model.answer_vocab={self.answer_vocab}: a token head's first ids, at most vocab_size")
        if self.part_positions < 0 or self.part_positions >= self.seq_len > 0:  # the mixer needs one position
            raise ConfigError(f"model.part_positions={self.part_positions}: a model part's positions need fewer "
                              "positions than model.seq_len (both come from the store's meta.json)")
        if self.loss not in LOSSES:
            raise ConfigError(f"model.loss={self.loss!r}: use one of {', '.join(LOSSES)}")

    def _check_mixer(self) -> None:
        if self.mixer not in ("mlp_t", "attention", "conv"):
            raise ConfigError(f"model.mixer={self.mixer!r}: use 'mlp_t', 'attention' or 'conv'")
        if self.mixer == "conv":
            self._check_grid()
        if self.mixer == "attention" and self.hidden_size % self.num_heads:
            raise ConfigError(f"model.hidden_size={self.hidden_size} is not divisible by model.num_heads="
                              f"{self.num_heads}: set model.num_heads to a divisor such as "
                              f"{_nearest_divisor(self.hidden_size, self.num_heads)}")
        if self.mixer == "attention" and (self.hidden_size // self.num_heads) % 2:
            raise ConfigError("model.hidden_size / model.num_heads must be even for rotary positions")

    def _check_grid(self) -> None:
        """mixer=conv: the sequence is the grid itself (no prefix, no positions)."""
        if self.puzzle_emb_len:
            raise ConfigError(f"model.mixer=conv convolves the grid itself: set model.puzzle_emb_len=0 "
                              f"(got {self.puzzle_emb_len}; a convolution needs no puzzle prefix or positions)")
        if self.num_classes:
            raise ConfigError("model.mixer=conv is for grid tasks (one output per cell): a classifier needs "
                              "mixer=mlp_t or attention")
        filled = self.grid_height and self.grid_width and self.seq_len
        if filled and self.grid_height * self.grid_width != self.seq_len:
            raise ConfigError(f"model.grid_height x grid_width = {self.grid_height} x {self.grid_width} is not "
                              f"model.seq_len={self.seq_len}: the grid comes from the store's meta.json")


@dataclass
class DataConfig:
    """Where the data store lives (built by `trmkit data ...`)."""

    path: str = ""  # dataset root holding train/ and test/ split directories
    eval_limit: int = 0  # evaluate on at most this many test examples (0 = all)
    stream: str = "store"  # "store": sample the training split; "generate": fresh examples from the task's generator
    #                        each step (seeded, resumable); "curriculum": the split drawn easy -> hard by its rating
    curriculum_samples: int = 0  # samples over which stream=generate ramps from easy to the store's difficulty
    #                              (0: no ramp), or stream=curriculum grows its pool to every training group
    trace: int = 0  # stream=generate: each supervision step's labels, a search's trace at this many cells a step

    def __post_init__(self) -> None:
        if self.stream not in ("store", "generate", "curriculum"):
            raise ConfigError(f"data.stream={self.stream!r}: use 'store', 'generate' or 'curriculum'")
        if min(self.curriculum_samples, self.trace) < 0:
            raise ConfigError("data.curriculum_samples and data.trace must be >= 0 (0 = none / off)")
        if self.stream == "curriculum" and not self.curriculum_samples:
            raise ConfigError("data.stream=curriculum needs data.curriculum_samples > 0: the samples over which "
                              "training moves from the easiest groups to all of them")


@dataclass
class TrainConfig:
    """Optimisation and the schedule of the training loop."""

    batch_size: int = 768  # global batch: ACT slots updated per optimizer step
    max_steps: int = 1000  # optimizer steps
    max_minutes: float = 0.0  # stop after this wall-clock budget (0 = no limit)
    fit_to_time: bool = False  # fit max_steps (so the lr schedule) to max_minutes from the measured step time
    optimizer: str = "adam_atan2"  # "adam_atan2" or "adamw"
    lr: float = 1e-4
    lr_min_ratio: float = 1.0  # cosine decays to lr * this (1.0 = constant after warm-up)
    warmup_steps: int = 2000
    weight_decay: float = 1.0
    beta1: float = 0.9
    beta2: float = 0.95
    puzzle_emb_lr: float = 1e-4  # sign-SGD on the rows of the puzzle embedding in use
    puzzle_emb_weight_decay: float = 1.0
    ema_decay: float = 0.999  # EMA of the weights used for evaluation (0 = off)
    ema_warmup: bool = False  # decay = min(ema_decay, (1+t)/(10+t)) so early EMA is not the init
    eval_every: int = 0  # evaluate every N steps (0 = only at the end)
    log_every: int = 10  # steps between metric lines
    micro_batch: int = 0  # slots per forward/backward (0 = planner decides)
    checkpoint_every: int = 0  # save a full checkpoint every N steps (0 = by time only)
    checkpoint_minutes: float = 10.0  # and every M minutes of wall time (0 = off)
    keep_checkpoints: int = 3  # rotation keeps the last K (plus the best)
    best_metric: str = "exact_accuracy"  # eval metric that marks the best checkpoint
    best_margin: str = "none"  # "se": a later evaluation becomes the best only when it beats the kept one by more
    #                            than its own standard error (se/<best_metric>, a bootstrap of the split)
    class_weighting: str = "none"  # "none" or "balanced": each label's loss weighted by N / (K * count)
    class_weights: str = ""  # e.g. "o=2.5": these labels' loss (vocabulary names) scaled, which moves their
    #                          decision threshold (a rare label the argmax would never pick)
    mask_given: bool = False  # cells whose input is one of the store's given_tokens (a maze's walls, S, G)
    #                           carry no loss and count in no metric: their answer is the input itself
    restore_best: bool = False  # end with the weights of the best evaluation (needs a validation split)
    early_stop_evals: int = 0  # stop after this many evaluations without a better best_metric (0 = never)
    progressive_loss: float = 0.0  # p: a new sample starts, with probability p, from the detached carry of
    #                                n ~ U{1..N_sup} steps taken without gradients (Bansal et al. 2022); 0 = off
    depth_curriculum: str = ""  # e.g. "0.3,0.6": shares of max_steps before which (T, n) is shallower (train/depth.py)
    init_from: str = ""  # a finished run whose weights start this one where names and shapes match (train/init.py)
    stagger_start: bool = False  # the slots' first samples end K/B steps apart (K = N_sup, B slots), so that slots
    #                              nothing halts before N_sup do not run in lockstep (train/step.py `stagger`)

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam_atan2", "adamw"):
            raise ConfigError(f"train.optimizer={self.optimizer!r}: use 'adam_atan2' or 'adamw'")
        if self.batch_size < 1 or self.max_steps < 0:
            raise ConfigError("train.batch_size must be >= 1 and train.max_steps >= 0")
        if self.micro_batch and self.batch_size % self.micro_batch:
            raise ConfigError(f"train.micro_batch={self.micro_batch} does not divide "
                              f"train.batch_size={self.batch_size}: choose a divisor")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError("train.ema_decay must be in [0, 1)")
        if self.class_weighting not in ("none", "balanced"):
            raise ConfigError(f"train.class_weighting={self.class_weighting!r}: use 'none' or 'balanced'")
        if not 0.0 <= self.progressive_loss <= 1.0:
            raise ConfigError(f"train.progressive_loss={self.progressive_loss}: a probability in [0, 1] (0 = off)")
        if self.early_stop_evals < 0:
            raise ConfigError("train.early_stop_evals must be >= 0 (0 = never stop early)")
        if self.fit_to_time and self.max_minutes <= 0:
            raise ConfigError("train.fit_to_time=true needs train.max_minutes > 0 (or `trmkit train --minutes N`)")
        if self.best_margin not in ("none", "se"):
            raise ConfigError(f"train.best_margin={self.best_margin!r}: use 'none' (any higher value is a new "
                              "best) or 'se' (higher by more than the evaluation's standard error)")
        parse_weights(self.class_weights)


def parse_weights(text: str) -> dict[str, float]:
    """train.class_weights "o=2.5,#=0.5" -> {"o": 2.5, "#": 0.5}; an error names the bad part."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.rpartition("=")
        try:
            out[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name or out[name] <= 0:
            raise ConfigError(f"train.class_weights: {part!r} is not NAME=WEIGHT with a positive weight "
                              "(e.g. train.class_weights=o=2.5)")
    return out


SWITCH, LOSSES = ("auto", "on", "off"), ("stablemax", "softmax")


@dataclass
class RunConfig:
    """Where results go and how the run is executed."""

    dir: str = "runs/default"  # run directory: config, metrics, summary, checkpoints
    seed: int = 0
    device: str = "auto"  # auto, or a torch device type: cpu or cuda
    dtype: str = "auto"  # "auto", "float32" or "bfloat16" (autocast)
    threads: int = 0  # intra-op threads (0 = planner decides)
    compile: str = "auto"  # "auto", "on" or "off"
    grad_checkpointing: str = "auto"  # "auto", "on" or "off": recompute activations in backward
    memory_budget: str = ""  # e.g. "6GB" (--memory-budget sets it); empty = 80% of the effective limit
    #                          minus what other processes use
    memory_guard: bool = True  # shrink the micro-batch before memory runs out
    keep_freed_memory: str = "auto"  # "auto", "on" or "off": glibc keeps freed blocks for reuse
    fused_inference: str = "auto"  # "auto", "on" or "off": no-gradient calls fuse SwiGLU into oneDNN matmuls
    dist_timeout: float = 1800.0  # several processes: seconds a collective waits for a silent rank

    def __post_init__(self) -> None:
        for key, allowed in (("dtype", ("auto", "float32", "bfloat16")), ("compile", SWITCH),
                             ("grad_checkpointing", SWITCH),
                             ("keep_freed_memory", SWITCH), ("fused_inference", SWITCH)):
            value = getattr(self, key)
            if value not in allowed:
                raise ConfigError(f"run.{key}={value!r}: expected one of {', '.join(allowed)}")
        self.budget_bytes()  # a budget that does not parse is refused when the config is loaded

    def budget_bytes(self) -> int | None:
        """run.memory_budget in bytes (None: the planner derives one from the machine)."""
        return parse_size(self.memory_budget, "run.memory_budget") if self.memory_budget else None


@dataclass
class Config:
    """The whole run: one object, written to the run dir and into checkpoints."""

    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sections: dict[str, Any] = field(default_factory=dict)  # an application's own sections by name ("rl"):
    #   its dataclass (`section` reads it), or the mapping as written where the reader was not given the class

    def to_dict(self) -> dict[str, Any]:
        """Every section by name, the applications' beside the generic ones (`rl:` as a top-level section)."""
        out = {name: dataclasses.asdict(getattr(self, name)) for name in GENERIC_SECTIONS}
        for name, value in self.sections.items():
            out[name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else dict(value)
        return out


GENERIC_SECTIONS = {"run": RunConfig, "model": ModelConfig, "data": DataConfig, "train": TrainConfig}
AppSections = Mapping[str, type]  # an application's sections: name -> dataclass (trmkit/registry.py's SECTIONS)
T = TypeVar("T")


def _nearest_divisor(n: int, near: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - near), -d))


def _all_sections(apps: AppSections | None) -> dict[str, type]:
    return {**GENERIC_SECTIONS, **(apps or {})}


def _valid_keys(apps: AppSections | None) -> list[str]:
    return [f"{s}.{f.name}" for s, cls in _all_sections(apps).items() for f in dataclasses.fields(cls)]


def _unknown_key(key: str, where: str, apps: AppSections | None = None) -> ConfigError:
    close = difflib.get_close_matches(key, _valid_keys(apps), n=1, cutoff=0.5)
    hint = f" did you mean {close[0]}?" if close else f" valid sections: {', '.join(_all_sections(apps))}"
    return ConfigError(f"{where}: unknown key '{key}'.{hint}")


def _coerce(value: Any, default: Any, key: str) -> Any:
    """Convert a YAML value to the field's type (ints for ints, floats for floats)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r}: expected true or false")
    if isinstance(default, int) and not isinstance(value, bool):
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
    elif isinstance(default, float) and not isinstance(value, bool):
        try:  # YAML 1.1 reads '1e-3' (no dot) as a string
            return float(value)
        except (TypeError, ValueError):
            pass
    elif isinstance(default, str):
        if isinstance(value, bool):  # YAML 1.1 reads an unquoted on/off/yes/no as a bool
            return "on" if value else "off"
        return str(value)
    raise ConfigError(f"{key}={value!r}: expected {type(default).__name__}")


def from_dict(raw: dict[str, Any], where: str = "config", apps: AppSections | None = None) -> Config:
    """Build a Config from nested dicts, rejecting unknown keys by name. `apps` are the applications'
    sections (trmkit/registry.py's SECTIONS), each built and checked as a generic one. A reader not given
    them (None) keeps any other section as the mapping it is, to be checked by its application when it
    reads it (`section`), and still refuses a misspelt generic one ('trian'). A key under its former section
    (data.hardness) is read under its current name (trmkit/names.py's MOVED), with a note on stderr."""
    generic: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for name, values in with_current_keys(raw or {}, where, say=_say).items():
        cls = _all_sections(apps).get(name)
        misspelt = difflib.get_close_matches(name, GENERIC_SECTIONS, n=1, cutoff=0.75)
        if cls is None and (apps is not None or misspelt):
            raise _unknown_key(name, where, apps)
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: section '{name}' must be a mapping of key: value")
        if name in GENERIC_SECTIONS:
            generic[name] = _build(cls, name, values, where, apps)
        else:
            own[name] = dict(values) if cls is None else _build(cls, name, values, where, apps)
    return Config(**generic, sections=own)


def _build(cls: type[T], name: str, values: Mapping[str, Any], where: str, apps: AppSections | None) -> T:
    """One section's dataclass from its mapping: types coerced, unknown keys named, checks in __post_init__."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():  # with_current_keys renamed the old keys before
        if key not in defaults:
            raise _unknown_key(f"{name}.{key}", where, apps)
        kwargs[key] = _coerce(value, defaults[key], f"{name}.{key}")
    return cls(**kwargs)


def _say(line: str) -> None:
    """A note on a former key: on stderr, as the other notes of the command line."""
    print(f"config: {line}", file=sys.stderr)


def section_types(cfg: Config) -> dict[str, type]:
    """The classes of cfg's application sections held typed ({"rl": RLConfig}): what a checkpoint's older
    config is completed from (train/checkpoint/identity.py `with_new_defaults`)."""
    return {name: type(v) for name, v in cfg.sections.items() if dataclasses.is_dataclass(v)}


def section(cfg: Config, name: str, cls: type[T]) -> T:
    """An application's section of cfg, typed and checked: `section(cfg, "rl", RLConfig)`; the defaults where
    cfg has none; a mapping kept by a reader that was not given the class is checked now, by key."""
    value = cfg.sections.get(name)
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"config: section '{name}' holds a {type(value).__name__}, not {cls.__name__}: "
                          f"set it with with_section(cfg, {name!r}, {cls.__name__}(...))")
    return _build(cls, name, value, "config", {name: cls})


def with_section(cfg: Config, name: str, value: Any) -> Config:
    """A copy of cfg with an application's section set (`with_section(cfg, "rl", RLConfig(attempts=4))`)."""
    if name in GENERIC_SECTIONS:
        raise ConfigError(f"config: '{name}' is a generic section: use replace(cfg, {name!r}, ...)")
    return dataclasses.replace(cfg, sections={**cfg.sections, name: value})


def parse_override(text: str) -> tuple[str, Any]:
    """'train.lr=3e-4' -> ('train.lr', 0.0003); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}': write it as section.key=value, e.g. train.max_steps=100")
    key, _, value = text.partition("=")
    return key.strip(), yaml.safe_load(value) if value.strip() else ""


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted key=value overrides to a nested dict (returns a new dict)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in (raw or {}).items()}
    for text in overrides:
        key, value = parse_override(text)
        if key in MOVED:  # a later override wins over the file's key under either name
            _say(f"override: {key} is now {MOVED[key][0]} (the old name still reads; write the new one)")
            key = MOVED[key][0]
        parts = key.split(".")
        if len(parts) != 2 or not isinstance(out.setdefault(parts[0], {}), dict):
            raise _unknown_key(key, "override")
        out[parts[0]][parts[1]] = value
    return out


def load(path: str | Path, overrides: list[str] | None = None, apps: AppSections | None = None) -> Config:
    """Read a YAML preset and apply overrides; errors name the file and key. `apps`: the applications'
    sections to build and check with the rest (`from_dict`), as the command line and the API pass them."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (presets live in configs/)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}): is it a config? A run's "
                          "config.yaml is written by `trmkit train`: restore it or train the run again") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (run, model, data, train)")
    return from_dict(apply_overrides(raw, overrides or []), where=str(path), apps=apps)


def to_yaml(cfg: Config) -> str:
    """The resolved config as YAML, keys in declared order (written to RUN_DIR/config.yaml; `load` reads it)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def replace(cfg: Config, section: str, **changes: Any) -> Config:
    """A copy of cfg with some fields of one generic section changed (checks rerun); an application's own
    section: `with_section`."""
    if section not in GENERIC_SECTIONS:
        raise ConfigError(f"config: '{section}' is not a generic section ({', '.join(GENERIC_SECTIONS)}): "
                          "set an application's section with with_section")
    new_section = dataclasses.replace(getattr(cfg, section), **changes)
    return dataclasses.replace(cfg, **{section: new_section})

"""The self-play application's config section: `rl:` in a YAML config, `rl.KEY=VALUE` overrides (docs/rl.md).

`RLConfig` is typed and checked like the generic sections; trmkit/registry.py's SECTIONS names it, so the
command line and the API refuse an unknown `rl.` key by name when they load a config. The RL code reads it
through `rl_config(cfg)`, which also checks a section kept as written by a reader that was not given the
class (a run's config.yaml read by the trainer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError

SECTION = "rl"  # the section's name in a config file and in overrides


@dataclass
class RLConfig:
    """Self-play reinforcement learning (TR-RPG) and its seeding: `trmkit rl` (docs/rl.md)."""

    proposals_per_type: int = 2  # proposer prompts per task type per round (each sampled propose_samples times)
    propose_samples: int = 2  # proposals drawn per prompt from one forward (their leave-one-out baseline)
    tasks_per_type: int = 16  # tasks the solver attempts per type per round: fresh proposals, then generated
    proposer_share: float = 0.25  # at most this share of the solver's tasks comes from fresh proposals
    attempts: int = 16  # k: solver samples per task, all from one forward; leave-one-out baseline per task
    critiques_per_type: int = 8  # solver answers the critique judges per type per round
    critique_samples: int = 4  # verdicts drawn per judged answer from one forward
    temperature: float = 0.5  # rollout temperature, in sampling and in log pi alike
    baseline: str = "group"  # "group": leave-one-out per prompt; "running": the (type, role) Welford mean/std;
    #                          "expert": expert iteration, A = max(reward, 0) (imitate what execution verified)
    weight_solve: float = 0.7  # each role's share of the policy-gradient loss
    weight_propose: float = 0.15
    weight_critique: float = 0.15
    anchor_weight: float = 0.5  # the seeding loss on executor traces, added to every update (0 = off)
    anchor_examples: int = 48  # seeding examples per update for the anchor
    mixed_target: float = 0.3  # the generator's curriculum keeps at least this share of tasks of mixed outcome
    curriculum_step: float = 0.0  # > 0: min and max lengths move by it, the proposer's share grows (rl/curriculum.py)
    update_epochs: int = 2  # optimizer updates per rollout batch (w = pi_theta / pi_old moves from 1 after the first)
    lr: float = 1e-4  # self-play's learning rate (seeding uses train.lr; both warm up over train.warmup_steps)
    max_grad_norm: float = 1.0  # self-play clips the gradient's global norm to this before each update (0 = off)
    beta_propose: float = 0.01  # the TR-RPG regulariser per role
    beta_solve: float = 0.05
    beta_critique: float = 0.1
    log_ratio_clip: float = 1.0  # log w is clipped to [-c, c]
    format_penalty: float = -0.5  # reward of a malformed response
    buffer_size: int = 2048  # valid tasks kept per type (oldest dropped first)
    seed_answer_weight: float = 1.0  # alpha of the seeding loss: extra weight on the answer's positions
    seed_share_solve: float = 0.6  # share of seeding examples per role (the rest split by the next two)
    seed_share_propose: float = 0.2
    seed_share_critique: float = 0.2
    seed_pool: int = 0  # N > 0: seeding and the anchor use only N fixed labelled traces (run.seed's); 0: fresh ones
    pool_val: int = 0  # M > 0: the pool's last M tasks are never trained on; the run's evaluations score them
    sft_label: str = "generator"  # abduction/induction SFT targets: the generator's answers, or "canonical" ones
    shortcut_tasks: str = "keep"  # "drop": self-play's generated tasks are never shortcut ones (rl/heldout.py)
    heldout_per_type: int = 1000  # held-out tasks per type, never trained on; seed 47 with <= 1000 reads the stored
    heldout_seed: int = 47  # set (trmkit/rl/heldout.json, shortcuts tagged), other values build one in memory
    eval_per_type: int = 100  # evaluations during a run use the first N held-out tasks per type; `rl eval` all
    cache_mb: int = 64  # execution-result cache, bytes-bounded LRU
    sandbox_cpu_seconds: float = 1.0  # per program run
    sandbox_wall_seconds: float = 5.0
    sandbox_memory_mb: int = 512  # the worker's address-space limit
    # a causal language model as the policy (rl.policy=lm; docs/rl.md "A language model as the policy")
    policy: str = "trm"  # "trm": the Tiny Recursive Model on the list language; "lm": a causal LM on Python text
    model_path: str = ""  # a local Hugging Face folder (config.json, *.safetensors, tokenizer); nothing downloaded
    model_shape: str = ""  # or random weights of a named shape (rl/lm/shapes.py): benchmarks and tests
    lm_dtype: str = "auto"  # float32 | bfloat16 | auto: bfloat16 only where the planner's dtype probe found it fast
    lora_rank: int = 16  # LoRA's r; 0 = full fine-tune (then the KL to the reference is off)
    lora_targets: str = "all"  # comma-separated projections (q_proj,v_proj,...) or "all" of them
    checkpoint_layers: str = "all"  # decoder layers under gradient checkpointing: all, none, or "0,1,5"
    chunk_tokens: int = 1024  # the lm_head and its softmax run over chunks of this many response tokens
    max_prompt_tokens: int = 512  # longer prompts keep their last tokens (counted)
    max_response_tokens: int = 256  # tokens generated per response
    micro_batch: int = 0  # sequences per forward in rollouts and updates; 0 = the planner picks (memory model)
    kl_reference: float = 0.0  # weight of the k3 KL to the adapters-off reference (0 = off)
    seed_files: str = ""  # comma-separated AZR seed jsonl files (rl/azr/seeds.py): the game's seed programs
    limo_files: str = ""  # comma-separated LIMO-style jsonl files for supervised seeding

    def __post_init__(self) -> None:
        for name in ("proposals_per_type", "propose_samples", "tasks_per_type", "critiques_per_type",
                     "critique_samples", "update_epochs", "heldout_per_type", "eval_per_type"):
            if getattr(self, name) < 1:
                raise ConfigError(f"rl.{name} must be >= 1, got {getattr(self, name)}")
        if self.attempts < 2:
            raise ConfigError(f"rl.attempts={self.attempts}: the per-task baseline needs k >= 2 samples per task")
        if self.proposals_per_type * self.propose_samples > self.proposer_slots():
            raise ConfigError("rl.proposals_per_type x propose_samples > rl.proposer_share x tasks_per_type")
        for key, allowed in (("baseline", ("group", "running", "expert")), ("sft_label", ("generator", "canonical")),
                             ("shortcut_tasks", ("keep", "drop"))):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"rl.{key}={getattr(self, key)!r}: use one of {', '.join(allowed)}")
        if not min(self.temperature, self.log_ratio_clip) > 0:
            raise ConfigError("rl.temperature and rl.log_ratio_clip must be > 0")
        if min(self.weight_solve, self.weight_propose, self.weight_critique, self.anchor_weight, self.seed_pool,
               self.curriculum_step) < 0:
            raise ConfigError("rl.weight_*, rl.anchor_weight, rl.seed_pool and rl.curriculum_step must be >= 0")
        if self.pool_val and not 0 < self.pool_val < self.seed_pool:
            raise ConfigError(f"rl.pool_val={self.pool_val}: a part of the pool, so 0 < rl.pool_val < rl.seed_pool")
        self._check_lm()

    def _check_lm(self) -> None:
        """The rl.policy=lm keys: each error names its key and the fix."""
        for key, allowed in (("policy", ("trm", "lm")), ("lm_dtype", ("auto", "float32", "bfloat16"))):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"rl.{key}={getattr(self, key)!r}: use one of {', '.join(allowed)}")
        for name in ("chunk_tokens", "max_prompt_tokens", "max_response_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"rl.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("lora_rank", "micro_batch", "kl_reference"):
            if getattr(self, name) < 0:
                raise ConfigError(f"rl.{name} must be >= 0, got {getattr(self, name)}")
        if self.policy == "lm" and bool(self.model_path) == bool(self.model_shape):
            raise ConfigError("rl.policy=lm: give exactly one of rl.model_path (a local Hugging Face folder) or "
                              "rl.model_shape (random weights of a named shape, e.g. tiny or qwen2.5-0.5b)")
        self.layer_list(0)  # the spelling of rl.checkpoint_layers; the range is checked against the model

    def layer_list(self, layers: int) -> list[int]:
        """rl.checkpoint_layers as decoder-layer indices of a model with `layers` of them."""
        text = self.checkpoint_layers.strip()
        if text in ("all", "none"):
            return list(range(layers)) if text == "all" else []
        try:
            return [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise ConfigError(f"rl.checkpoint_layers={text!r}: use all, none, or layer indices such as 0,1,5"
                              ) from None

    def target_list(self, known: tuple[str, ...]) -> tuple[str, ...]:
        """rl.lora_targets as projection names ("all": every one of `known`)."""
        if self.lora_targets.strip() == "all":
            return known
        return tuple(p.strip() for p in self.lora_targets.split(",") if p.strip())

    def proposer_slots(self) -> int:
        """Solver tasks per type that fresh proposals may fill."""
        return int(self.proposer_share * self.tasks_per_type)


APPS: dict[str, type] = {SECTION: RLConfig}  # what the rl commands give the config loader: their own section


def rl_config(cfg: Config) -> RLConfig:
    """cfg's `rl` section, typed and checked (the defaults where cfg has none)."""
    return config_mod.section(cfg, SECTION, RLConfig)


def with_rl(cfg: Config, **changes: object) -> Config:
    """A copy of cfg whose `rl` section has these fields changed (checks rerun): `with_rl(cfg, attempts=4)`."""
    return config_mod.with_section(cfg, SECTION, dataclasses.replace(rl_config(cfg), **changes))

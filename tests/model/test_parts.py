"""The model composes an application's pieces through model/parts.py, never by its names (docs/architecture.md)."""

import ast
import re
from pathlib import Path

import pytest
import torch

from trmkit.config import ModelConfig
from trmkit.model.parts import Part
from trmkit.model.trm import TRM

MODEL = Path(__file__).resolve().parents[2] / "trmkit" / "model"
APPLICATIONS = ("trmkit.tasks", "trmkit.email", "trmkit.rl", "trmkit.predict", "trmkit.bench", "trmkit.learn",
                "trmkit.report", "trmkit.registry", "trmkit.api", "trmkit.cli")
APP_FIELD = re.compile(r"^(trace_|pooled_|input_linear|bag_)")  # the maze trace's and the e-mail bag's names


def trees() -> dict[str, ast.AST]:
    return {path.name: ast.parse(path.read_text()) for path in sorted(MODEL.glob("*.py"))}


def test_the_model_imports_no_task_or_application():
    found = []
    for name, tree in trees().items():
        for node in ast.walk(tree):
            modules = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                       else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"model/{name} imports {m}" for m in modules if m.startswith(APPLICATIONS)]
    assert not found, "\n".join(found)


def test_the_model_reads_no_applications_field_by_name():
    read = {(name, node.attr) for name, tree in trees().items() for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and APP_FIELD.match(node.attr)}
    assert not read, f"an application's fields read by name (a maze trace and the e-mail bag are parts): {read}"
    assert all(not APP_FIELD.match(path.stem) for path in MODEL.glob("*.py"))  # nor its modules (input_linear)


class Doubler(Part):
    """A toy part: two more outputs, folded by dropping them and doubling the rest."""

    def __init__(self):
        super().__init__(extra_outputs=2)

    def answer(self, logits, inputs=None):
        return 2 * logits[..., :-2]


def test_parts_widen_the_head_and_every_answer_goes_through_them_in_turn():
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=2,
                      puzzle_emb_len=2, vocab_size=5, seq_len=4, num_puzzle_ids=1)
    torch.manual_seed(0)
    plain = TRM(cfg)
    torch.manual_seed(0)
    model = TRM(cfg, [Doubler(), Doubler()])
    assert plain.extra_outputs == 0 and model.extra_outputs == 4 and model.lm_head.out_features == 5 + 4
    assert list(plain.state_dict()) == list(model.state_dict())  # parts without weights add no names
    assert torch.equal(plain.embed_tokens.weight, model.embed_tokens.weight)  # nor random draws before the head
    logits = torch.arange(9.0).expand(1, 4, 9)
    assert torch.equal(model.answer_logits(logits), 4 * torch.arange(5.0).expand(1, 4, 5))
    assert plain.answer_logits(logits) is logits


class Tail(Part):
    """A toy part that reads the input's last 2 positions: their sum embedding into every token, and its
    own weight times their count of non-pads into the class logits."""

    def __init__(self):
        super().__init__(positions=2)

    def build(self, cfg, head):
        self.scale = torch.nn.Parameter(torch.ones(cfg.num_classes))
        torch.nn.init.zeros_(head.weight)  # a part may set the head's start

    def read_input(self, inputs, embed):
        tail = inputs[:, -self.positions:].long()
        return embed(tail).sum(1), (tail != 0).sum(1, keepdim=True).float()

    def add_to_tokens(self, x, reading):
        return x + reading[0].unsqueeze(1)

    def class_logits(self, logits, reading):
        return logits + self.scale * reading[1]


def test_a_part_reads_its_positions_adds_to_the_tokens_and_to_the_class_logits():
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=2,
                      mixer="attention", puzzle_emb_len=0, vocab_size=9, seq_len=6, num_puzzle_ids=1, num_classes=3,
                      part_positions=2)
    torch.manual_seed(0)
    model = TRM(cfg, [Tail()])
    assert model.seq_total == 4 and torch.equal(model.class_head.weight, torch.zeros(3, 16))
    params = [name for name, _ in model.named_parameters()]
    assert params.index("class_head.bias") < params.index("parts.0.scale") < params.index("q_head.weight")
    x = torch.tensor([[1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 0, 0]])
    embedded = model.embed_input(x, torch.zeros(2, dtype=torch.long))
    tokens = model.embed_tokens(x[:, :4]) + (model.embed_tokens(x[:, 4:]).sum(1)).unsqueeze(1)
    torch.testing.assert_close(embedded.x, model.embed_scale * tokens)
    assert torch.equal(embedded.rows(torch.tensor([1])).reads[0][1], torch.tensor([[0.0]]))  # rows cut every reading
    carry = model.initial_carry(2)
    _, _, logits, _ = model(carry.z_H, carry.z_L, x, torch.zeros(2, dtype=torch.long), embedded)
    z_H, _, _, _ = model(carry.z_H, carry.z_L, x, torch.zeros(2, dtype=torch.long))
    plain = model.class_head(z_H.mean(1))
    torch.testing.assert_close(logits[:, 0], plain + torch.tensor([[1.0], [0.0]]))  # the tail's count, scaled 1


def test_a_store_whose_positions_a_part_reads_needs_that_part():
    from trmkit.config import Config, ConfigError
    from trmkit.model.parts import build_parts

    cfg = Config(model=ModelConfig(vocab_size=9, seq_len=6, num_puzzle_ids=1, num_classes=3, part_positions=2))
    assert len(build_parts(lambda m: [Tail()], cfg)) == 1
    whole = lambda c: [Tail()] if c.model is cfg.model else []  # noqa: E731
    whole.reads_config = True  # a factory that reads its application's section: given the whole config
    assert len(build_parts(whole, cfg)) == 1
    with pytest.raises(ConfigError, match="model.part_positions=2: .* the parts given read 0"):
        build_parts(None, cfg)

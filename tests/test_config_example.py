"""config.example.yaml documents every key of the typed config (commented or set)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel

from bot.config.model import AppConfig

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.yaml"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_keys(ann, f"{prefix}{name}."))
        else:
            out.append(f"{prefix}{name}")
    return out


def test_every_config_key_is_documented_in_the_example() -> None:
    text = EXAMPLE.read_text()
    parsed = yaml.safe_load(text)
    missing = []
    for dotted in _keys(AppConfig):
        node = parsed
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) and part in node else None
            if node is None:
                break
        leaf = dotted.rsplit(".", 1)[-1]
        documented_as_comment = re.search(rf"^\s*#\s*{re.escape(leaf)}:", text, re.M)
        if node is None and not documented_as_comment and not _present_as_null(parsed, dotted):
            missing.append(dotted)
    assert missing == []


def _present_as_null(parsed: dict, dotted: str) -> bool:
    node = parsed
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return isinstance(node, dict) and parts[-1] in node

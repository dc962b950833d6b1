"""``/model``'s answer (bot/commands.py ``model_answer``, the same on every channel and in
the dashboard's new chat): aliases configured in capitals, a current name no alias has."""

from __future__ import annotations

from pathlib import Path

from bot.commands import model_answer
from bot.config.model import AppConfig, ModelsConfig


def test_an_alias_configured_in_capitals_is_found(tmp_path: Path) -> None:
    # Regression: the name typed is lowered, so "/model Opus" (or "opus") answered
    # "Unknown model 'opus'. Did you mean Opus?" for an alias configured as "Opus".
    aliases = {"Opus": "claude-opus-4-8", "sonnet": "claude-sonnet-4-6"}
    config = AppConfig(data_dir=tmp_path, models=ModelsConfig(aliases=aliases))
    for typed in ("Opus", "opus", "OPUS"):
        text, alias = model_answer(config, "sonnet", typed)
        assert alias == "Opus"
        assert text == "Model switched to Opus (claude-opus-4-8) for this conversation."
    text, alias = model_answer(config, "sonnet", "opsu")
    assert alias is None and "Did you mean Opus?" in text


def test_a_current_name_no_alias_has_is_not_shown_as_its_own_id(tmp_path: Path) -> None:
    # Regression: a conversation on an alias removed from the configuration since
    # showed "Current model: opus (opus)", as if "opus" were a model id.
    config = AppConfig(data_dir=tmp_path)
    del config.models.aliases["opus"]
    text, alias = model_answer(config, "opus", "")
    assert alias is None
    assert text == (
        "Current model: opus (not in models.aliases). Available: sonnet, haiku. "
        "Use /model <name> to switch."
    )
    text, _ = model_answer(config, "haiku", "")
    assert text.startswith("Current model: haiku (claude-haiku-4-5). ")


def test_the_list_marks_the_models_the_service_does_not_offer(tmp_path: Path) -> None:
    # Regression: "/model" listed every alias alike, one the model service had refused
    # (the start's check, a refused switch, a reply's 404) included: the owner picked it
    # and was refused, or saw their current model listed as if it answered.
    config = AppConfig(data_dir=tmp_path)
    opus, sonnet = config.resolve_model("opus"), config.resolve_model("sonnet")
    text, alias = model_answer(config, "sonnet", "", missing={opus})
    assert alias is None
    assert text == (
        f"Current model: sonnet ({sonnet}). Available: "
        "opus (not offered by the model service), sonnet, haiku. Use /model <name> to switch."
    )
    text, _ = model_answer(config, "opus", "", missing={opus})
    assert text.startswith(f"Current model: opus ({opus}, not offered by the model service). ")
    text, _ = model_answer(config, "sonnet", "")  # nothing known missing: the plain list
    assert "Available: opus, sonnet, haiku." in text

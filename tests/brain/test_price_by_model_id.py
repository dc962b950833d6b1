"""``models.prices`` keyed by a real model id, and aliases sharing a model: every call is
priced by its alias, so an id's price was never reached behind the default alias
prices, and an extra alias for a priced model found no price at all (session 40)."""

from __future__ import annotations

from bot.brain.base import Usage
from bot.brain.cost import cost_usd, price_for
from bot.config.model import AppConfig, default_aliases

USAGE = Usage(1_000_000, 100_000)


def config(models: dict[str, object]) -> AppConfig:
    return AppConfig.model_validate({"models": models})


def test_an_id_price_wins_over_the_default_alias_price() -> None:
    cfg = config(
        {
            "aliases": {**default_aliases(), "sonnet": "claude-sonnet-5"},
            "prices": {"claude-sonnet-5": {"input": 10.0, "output": 50.0}},
        }
    )
    assert cost_usd(cfg, "sonnet", USAGE) == 15.0
    assert cost_usd(cfg, "claude-sonnet-5", USAGE) == 15.0
    # The other aliases keep their default prices.
    assert cost_usd(cfg, "haiku", USAGE) == 1.5


def test_an_owner_alias_price_still_wins_over_the_default() -> None:
    cfg = config({"prices": {"sonnet": {"input": 4.0, "output": 20.0}}})
    assert cost_usd(cfg, "sonnet", USAGE) == 6.0
    assert cost_usd(cfg, "claude-sonnet-4-6", USAGE) == 6.0


def test_an_id_price_wins_over_an_alias_price_for_the_same_model() -> None:
    cfg = config(
        {
            "prices": {
                "haiku": {"input": 2.0, "output": 10.0},
                "claude-haiku-4-5": {"input": 3.0, "output": 15.0},
            }
        }
    )
    assert cost_usd(cfg, "haiku", USAGE) == 4.5


def test_an_extra_alias_takes_the_price_of_its_model() -> None:
    cfg = config({"aliases": {**default_aliases(), "fast": "claude-haiku-4-5"}})
    assert cost_usd(cfg, "fast", USAGE) == 1.5


def test_an_extra_alias_in_a_table_without_the_default_alias() -> None:
    # The file's aliases replace the table: haiku's default price is still its model's.
    cfg = config({"aliases": {"sonnet": "claude-sonnet-4-6", "fast": "claude-haiku-4-5"}})
    assert cost_usd(cfg, "fast", USAGE) == 1.5


def test_a_default_alias_pointed_elsewhere_does_not_price_its_old_model() -> None:
    # sonnet now names another model at the owner's price; the model it used to name,
    # under a new alias, is not billed at that price.
    cfg = config(
        {
            "aliases": {"sonnet": "claude-sonnet-5", "old": "claude-sonnet-4-6"},
            "prices": {"sonnet": {"input": 10.0, "output": 50.0}},
        }
    )
    assert cost_usd(cfg, "sonnet", USAGE) == 15.0
    assert price_for(cfg, "old") is None


def test_an_unknown_model_has_no_price() -> None:
    cfg = config({"aliases": {**default_aliases(), "new": "claude-new-1"}})
    assert price_for(cfg, "new") is None
    assert cost_usd(cfg, "new", USAGE) is None

"""scripts/simulate_edits.py --config: proposer settings read as their fields' types."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from daemon.edit_proposer import EditProposerConfig

_SPEC = importlib.util.spec_from_file_location(
    "simulate_edits", Path(__file__).resolve().parents[2] / "scripts" / "simulate_edits.py")
simulate_edits = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(simulate_edits)


def test_settings_are_read_as_their_fields_types():
    cfg = simulate_edits.proposer_config(EditProposerConfig(), ["cheaper_bytes=false", "k_guess=4"])
    assert cfg.cheaper_bytes is False and cfg.k_guess == 4
    assert simulate_edits.proposer_config(EditProposerConfig(), ["cheaper_bytes=True"]).cheaper_bytes is True


@pytest.mark.parametrize("setting,message", [("cheaper_bytes=flase", "true or false"),
                                             ("cheaper_bytes=1", "true or false"),
                                             ("no_such_field=1", "no field"),
                                             ("k_guess=four", "not a valid int")])
def test_bad_settings_are_refused(setting, message):
    with pytest.raises(SystemExit, match=message):
        simulate_edits.proposer_config(EditProposerConfig(), [setting])

"""The reference pages say what the code does: docs/commands.md names every make target of the
Makefile's `.PHONY` list, every flag of every `rps-serve` command in that command's own lines, and
every policy of the simulator, as served by the plug-in exactly where it is a `Policy`;
docs/layout.md's Priority Regulator row names every policy. A target, flag or policy added without
its line fails here."""

from __future__ import annotations

import argparse
import re

from rps_harness.cli import parser
from rps_harness.sim.simulator import POLICY_VARIANTS
from rps_serve.scheduling.parameters import Policy
from tests.checkout import CHECKOUT

COMMANDS_PAGE = CHECKOUT / "docs" / "commands.md"
TICKED = re.compile(r"`([^`]+)`")


def _section(page: str, title: str) -> str:
    """The text of the `## title` section of `page`."""
    parts = re.split(r"^## ", page, flags=re.MULTILINE)
    matching = [part for part in parts if part.startswith(title + "\n")]
    assert matching, f"no section '## {title}'"
    return matching[0]


def _phony_targets() -> set[str]:
    makefile = (CHECKOUT / "Makefile").read_text()
    match = re.search(r"^\.PHONY:(.*)$", makefile, flags=re.MULTILINE)
    assert match, "the Makefile has no .PHONY line"
    return set(match.group(1).split())


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    actions = [action for action in parser()._actions if isinstance(action, argparse._SubParsersAction)]
    assert len(actions) == 1
    return dict(actions[0].choices)


def _usage_lines(page: str) -> dict[str, str]:
    """Per command, its lines in the usage block: the line that starts `rps-serve NAME` and the
    indented lines that continue it."""
    block = _section(page, "rps-serve").split("```")[1]
    usage: dict[str, str] = {}
    command = ""
    for line in block.splitlines():
        if line.startswith("rps-serve "):
            command = line.split()[1]
            usage[command] = usage.get(command, "") + line
        elif line.startswith(" ") and command:
            usage[command] += line
    return usage


def test_every_make_target_is_in_the_targets_table() -> None:
    table = _section(COMMANDS_PAGE.read_text(), "Make targets")
    named = {
        name
        for row in table.splitlines()
        if row.startswith("| `")
        for name in TICKED.findall(row.split("|")[1])
    }
    assert not sorted(_phony_targets() - named), "make targets missing from docs/commands.md"
    assert not sorted(named - _phony_targets()), "docs/commands.md names targets the Makefile lacks"


def test_every_flag_of_every_command_is_in_its_usage_lines() -> None:
    usage = _usage_lines(COMMANDS_PAGE.read_text())
    commands = _subcommands()
    assert not sorted(set(commands) - set(usage)), "commands missing from docs/commands.md"
    assert not sorted(set(usage) - set(commands)), "docs/commands.md names commands that do not exist"
    missing = [
        f"{name} {flag}"
        for name, command in commands.items()
        for action in command._actions
        for flag in action.option_strings
        if flag.startswith("--")
        and flag != "--help"
        and not re.search(rf"{re.escape(flag)}(?![\w-])", usage[name])
    ]
    assert not missing, "flags missing from their command's lines in docs/commands.md"


def test_the_policy_table_names_every_policy_and_where_it_runs() -> None:
    rows = [row.split("|") for row in _section(COMMANDS_PAGE.read_text(), "Policies").splitlines()]
    runs_in = {
        TICKED.findall(row[1])[0]: row[2].strip() for row in rows if len(row) > 2 and row[1].startswith(" `")
    }
    policies = {policy.value for policy in Policy}
    assert not sorted(set(POLICY_VARIANTS) - set(runs_in)), "policies missing from docs/commands.md"
    assert not sorted(set(runs_in) - set(POLICY_VARIANTS)), (
        "docs/commands.md names policies that do not exist"
    )
    assert {name for name, where in runs_in.items() if "plug-in" in where} == policies


def test_the_regulator_row_of_the_layout_names_every_policy() -> None:
    layout = (CHECKOUT / "docs" / "layout.md").read_text()
    rows = [row for row in layout.splitlines() if row.startswith("| `rps_serve.scheduling.parameters`")]
    assert len(rows) == 1
    assert {policy.value for policy in Policy} <= set(TICKED.findall(rows[0]))

"""docs/contract.md's tables list exactly the `trainhook.io/` keys the code knows, each where the
code accepts it (a label, an annotation, or both), and name the settings the webhook copies onto
pod templates as the code copies them."""

from __future__ import annotations

import re
from pathlib import Path

from webhook.core import contract, keys
from webhook.core.job.settings import SETTING_KEYS

REPO = Path(__file__).resolve().parent.parent
CONTRACT = (REPO / "docs" / "contract.md").read_text()
README = (REPO / "README.md").read_text()
KEY = re.compile(r"`(trainhook\.io/[a-z-]+)`")


def key_tables(markdown: str) -> list[tuple[str, str, list[str]]]:
    """Each row of every table whose first columns are `where | key`: (where, key cell, keys)."""
    rows = []
    in_table = False
    for line in markdown.splitlines():
        if line.startswith("| where | key |"):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if in_table and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows.append((cells[0], cells[1], KEY.findall(cells[1])))
    return rows


def documented(markdown: str, where: str) -> set[str]:
    return {key for place, _, found in key_tables(markdown) if place == where for key in found}


def test_every_row_of_the_key_tables_names_one_key() -> None:
    rows = key_tables(CONTRACT)
    assert len(rows) > 40
    assert [cell for _, cell, found in rows if len(found) != 1] == []


def test_the_contract_lists_every_key_the_code_knows_and_no_other() -> None:
    listed = {key for _, _, found in key_tables(CONTRACT) for key in found}
    assert sorted(contract.known_keys() - listed) == [], "known to the code, not in contract.md"
    assert sorted(listed - contract.known_keys()) == [], "in contract.md, refused by the code"


def test_the_keys_documented_as_labels_are_the_labels_the_code_accepts() -> None:
    labels = documented(CONTRACT, "label") | documented(CONTRACT, "label and annotation")
    assert labels == set(contract.LABELS)


def test_the_keys_documented_as_annotations_are_the_annotations_the_code_accepts() -> None:
    # A scheduling gate's name is a known key too: the code accepts it as an annotation.
    annotations = (
        documented(CONTRACT, "annotation")
        | documented(CONTRACT, "label and annotation")
        | documented(CONTRACT, "scheduling gate")
    )
    assert annotations == set(keys.ANNOTATIONS)
    assert documented(CONTRACT, "label and annotation") == set(contract.LABELS_AND_ANNOTATIONS)


def test_every_setting_the_webhook_parses_is_in_the_table_of_keys_a_user_sets() -> None:
    user_table = CONTRACT.split("## Keys Trainhook writes", 1)[0]
    users = {key for _, _, found in key_tables(user_table) for key in found}
    assert sorted(set(SETTING_KEYS) - users) == []


def test_the_settings_copied_onto_the_pod_template_are_those_the_webhook_copies() -> None:
    sentence = re.search(r"webhook copies the pod-level ones \(([^)]*)\)", CONTRACT)
    assert sentence is not None
    named = {contract.PREFIX + name.strip() for name in sentence[1].split(",")}
    assert named == set(contract.POD_SETTINGS)


def test_the_readme_keys_are_rows_of_the_contract_with_the_same_place() -> None:
    full = {(where, key) for where, _, found in key_tables(CONTRACT) for key in found}
    short = {(where, key) for where, _, found in key_tables(README) for key in found}
    assert short and short <= full

import jsonpatch

from webhook.core.draft import Draft
from webhook.core.patch import diff


def test_a_missing_parent_is_added_whole() -> None:
    original = {"metadata": {"name": "p"}}
    draft = Draft(original)
    draft.dict_at("metadata", "annotations")["a/b"] = "1"
    ops = diff(original, draft.root)
    assert ops == [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}}]
    assert jsonpatch.apply_patch(original, ops) == draft.root


def test_slash_and_tilde_in_keys_are_escaped() -> None:
    original = {"labels": {"x": "1"}}
    draft = Draft(original)
    draft.dict_at("labels")["example.com/a~b"] = "2"
    assert diff(original, draft.root) == [
        {"op": "add", "path": "/labels/example.com~1a~0b", "value": "2"}
    ]


def test_a_list_that_only_grew_gets_appends() -> None:
    original = {"volumes": [{"name": "a"}]}
    draft = Draft(original)
    draft.list_at("volumes").append({"name": "b"})
    assert diff(original, draft.root) == [
        {"op": "add", "path": "/volumes/-", "value": {"name": "b"}}
    ]


def test_a_list_changed_at_the_front_is_replaced_whole() -> None:
    original = {"env": [{"name": "A"}]}
    new = {"env": [{"name": "Z"}, {"name": "A"}]}
    assert diff(original, new) == [{"op": "replace", "path": "/env", "value": new["env"]}]


def test_the_draft_never_touches_the_original() -> None:
    original = {"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}}
    draft = Draft(original)
    draft.list_at("spec", "containers", 0, "env").append({"name": "B", "value": "2"})
    assert original == {
        "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}
    }
    assert diff(original, draft.root) == [
        {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "B", "value": "2"}}
    ]

# -*- coding: utf-8 -*-
"""Unit tests for the checkpoint_lookalikes filter (plugins/filter/checkpoint.py)."""

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.filter.checkpoint import FilterModule, checkpoint_lookalikes

REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
LOOKALIKES = [
    {"name": "DeepSeek-V4-Flash (the preview)", "repo_id": "deepseek-ai/DeepSeek-V4-Flash",
     "readme_marker": "We present a preview version"},
    {"name": "DeepSeek-V4-Flash-DSpark", "repo_id": "deepseek-ai/DeepSeek-V4-Flash-DSpark", "date": "2026-07-04"},
]


def manifest(repo="deepseek-ai/DeepSeek-V4-Flash-0731", rev=REV, date="2026-08-01T00:00:00+00:00", readme="# 0731"):
    return {"repo_id": repo, "revision": rev, "last_modified": date, "readme_head": readme,
            "files": {"config.json": {"size": 10, "blob": "a" * 40, "lfs": False}}}


def test_the_pinned_checkpoint_passes():
    assert checkpoint_lookalikes(manifest(), "deepseek-ai/DeepSeek-V4-Flash-0731", REV, LOOKALIKES, "2026-07-31") == []


def test_dspark_is_named():
    rev = "d" * 40
    reasons = checkpoint_lookalikes(manifest("deepseek-ai/DeepSeek-V4-Flash-DSpark", rev, "2026-07-04T00:00:00Z"),
                                    "deepseek-ai/DeepSeek-V4-Flash-DSpark", rev, LOOKALIKES, "2026-07-31")
    text = " ".join(reasons)
    assert "this is DeepSeek-V4-Flash-DSpark" in text and "commit dated 2026-07-04" in text and "older than" in text


def test_preview_is_named_by_its_readme():
    reasons = checkpoint_lookalikes(manifest(readme="We present a preview version of DeepSeek-V4-Flash"),
                                    "deepseek-ai/DeepSeek-V4-Flash-0731", REV, LOOKALIKES, "2026-07-31")
    assert any("preview" in r and "We present a preview version" in r for r in reasons)


def test_another_revision_is_refused():
    reasons = checkpoint_lookalikes(manifest(rev="1" * 40), "deepseek-ai/DeepSeek-V4-Flash-0731", REV)
    assert any("is not the pinned" in r for r in reasons)


def test_registered():
    assert "checkpoint_lookalikes" in FilterModule().filters()

"""EditDraftPolicy: long drafts while the output follows the original, none once it departs."""

from __future__ import annotations

import numpy as np

from ngramd.daemon.engine.policy import AdaptiveConfig, CostModel, DraftPolicy
from ngramd.daemon.edit.editor import EditDraftPolicy
from ngramd.index.draft import Branch, Draft, Source

# the measured 2-thread CPU curve (docs/benchmarks.md at 53c478e, Forward pass cost)
COST = CostModel(sizes=[1, 2, 4, 8, 16, 32], ms=[34.5, 37.7, 48.8, 80.7, 111.5, 144.9])


def _original_draft(n=64):
    return Draft((Branch(np.arange(100, 100 + n, dtype=np.int32), 1, Source.EDIT_ORIGINAL, 0),))


def _policy(cost=COST):
    return EditDraftPolicy(DraftPolicy(cost, AdaptiveConfig()))


def _drafted(policy, draft, budget=64):
    chosen = policy.choose(draft, budget)
    return len(chosen[0][1]) if chosen else 0


def test_drafts_long_while_the_output_follows_the_original():
    policy, draft = _policy(), _original_draft()
    first = _drafted(policy, draft)
    for _ in range(5):
        policy.feedback(draft, 0, first, first)  # everything accepted
    assert first >= 8 and _drafted(policy, draft) > first


def test_stops_drafting_when_the_output_departs_and_resumes_when_it_follows_again():
    # a device where verifying even one extra token costs 50% more
    policy, draft = _policy(CostModel(sizes=[1, 2, 64], ms=[50.0, 75.0, 200.0])), _original_draft()
    assert _drafted(policy, draft) > 0
    for _ in range(10):
        d = _drafted(policy, draft)
        if d:
            policy.feedback(draft, -1, 0, d)  # the first drafted token is rejected every time
        else:
            policy.declined(draft, 7)  # and the plain passes make other tokens
    assert _drafted(policy, draft) == 0, "a lost edit decodes plainly"
    for _ in range(30):
        policy.declined(draft, 7)
    assert _drafted(policy, draft) == 0, "no draft is spent while the output keeps departing"
    resumed = []
    for _ in range(8):  # the plain passes make the original's tokens again
        resumed.append(_drafted(policy, draft))
        policy.declined(draft, int(draft.branches[0].tokens[0]))
    assert resumed[0] == 0 and _drafted(policy, draft) > 0, "the original is drafted again once followed"


def test_rejections_shrink_drafts_to_what_pays():
    policy, draft = _policy(), _original_draft()
    first = _drafted(policy, draft)
    for _ in range(10):
        d = _drafted(policy, draft)
        if d:
            policy.feedback(draft, -1, 0, d)
    assert _drafted(policy, draft) <= 2 < first


def test_other_drafts_go_to_the_inner_policy():
    policy = _policy()
    index_draft = Draft((Branch(np.arange(5, 9, dtype=np.int32), 3, Source.BUFFER, 6),))
    mine = [(b, t.tolist()) for b, t in policy.choose(index_draft, 8)]
    assert mine == [(b, t.tolist()) for b, t in policy.inner.choose(index_draft, 8)]

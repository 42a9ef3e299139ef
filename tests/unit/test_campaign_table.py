"""The robustness campaign's table (tests/harness/campaign.py): its cases, the short subset, the results table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import campaign
from tests.harness.campaign import Case, Result

pytestmark = pytest.mark.unit


def test_every_action_runs_on_both_engines_but_the_upgrade_and_the_quorum_loss_and_scale_in_on_both_backends() -> None:
    cases = campaign.cases()
    assert {c.action for c in cases} == set(campaign.ACTIONS)
    assert {c.engine for c in cases if c.action == campaign.UPGRADE} == {campaign.ETCD}
    assert {c.engine for c in cases if c.action == campaign.QUORUM_LOSS} == {campaign.ETCD}, "Xline: RecoveryUnsupported"
    assert {c.engine for c in cases if c.action == campaign.ROLL} == {campaign.ETCD, campaign.XLINE}
    assert {c.backend for c in cases if c.action == campaign.SCALE_IN} == {campaign.STS, campaign.ASTS}
    assert {c.backend for c in cases if c.action == campaign.SCALE_OUT} == {campaign.ASTS}
    assert len({c.id for c in cases}) == len(cases), "ids unique"


def test_a_lights_out_takes_no_store_fault_and_every_fault_lands_somewhere() -> None:
    cases = campaign.cases()
    assert {c.fault for c in cases if c.action == campaign.LIGHTS_OUT} == \
        {campaign.NO_FAULT, campaign.OPERATOR_KILLED, campaign.SIDECAR_KILLED, campaign.CLOCK_SKEWED}
    assert {c.fault for c in cases} == set(campaign.FAULTS)


def test_a_skewed_clock_lands_on_every_action_and_a_full_volume_on_every_one_that_keeps_its_members() -> None:
    """A quorum loss's survivor with a full volume could not recover at all, and a lights-out stops
    every store anyway: a full volume adds nothing to either. A skewed sidecar clock applies to all."""
    cases = campaign.cases()
    assert {c.action for c in cases if c.fault == campaign.CLOCK_SKEWED} == set(campaign.ACTIONS)
    assert {c.action for c in cases if c.fault == campaign.VOLUME_FULL} == \
        set(campaign.ACTIONS) - {campaign.QUORUM_LOSS, campaign.LIGHTS_OUT}
    assert campaign.CLOCK_SKEWED not in campaign.SHORT_FAULTS and campaign.VOLUME_FULL not in campaign.SHORT_FAULTS
    assert len(cases) == 178


def test_the_short_subset_is_fixed_driven_on_etcd_and_spread() -> None:
    cases = campaign.cases()
    short = campaign.short_subset(cases)
    assert short == campaign.short_subset(cases), "seeded: the same every run"
    assert len(short) == campaign.SHORT_SIZE
    assert all(c.action in campaign.SHORT_ACTIONS and c.engine == campaign.ETCD for c in short)
    assert len({c.action for c in short}) == len({c.fault for c in short}) == len(short)
    assert campaign.short_subset(cases, seed=1) != short, "the seed chooses"


def test_the_short_subset_leaves_the_long_actions_to_make_robustness() -> None:
    """The upgrade, the quorum loss and backup-then-restore are driven, but not in `make test`'s
    subset, which stays the four cases its time was measured with."""
    short = campaign.short_subset(campaign.cases())
    assert [c.id for c in short] == [
        "scale-in-follower-paused-etcd-AdvancedStatefulSet", "lights-out-sidecar-killed-etcd-AdvancedStatefulSet",
        "replace-leader-leader-paused-etcd-AdvancedStatefulSet", "roll-leases-refused-etcd-AdvancedStatefulSet"]
    assert not {campaign.UPGRADE, campaign.QUORUM_LOSS, campaign.BACKUP_RESTORE} & set(campaign.SHORT_ACTIONS)


def test_the_longest_unavailability_is_the_longest_gap_between_answers() -> None:
    s = 1_000_000_000
    spans = [(0, 1 * s), (0, None), (2 * s, 5 * s), (5 * s, 6 * s)]
    assert campaign.longest_unavailability(spans) == 4.0  # answers at 1, 5 and 6 s
    assert campaign.longest_unavailability([]) == 0.0


def test_the_table_sums_what_ran_and_says_what_did_not(tmp_path: Path) -> None:
    scale_in = [Case(campaign.SCALE_IN, campaign.OPERATOR_KILLED, campaign.ETCD, b) for b in (campaign.STS, campaign.ASTS)]
    ran = [Result(scale_in[0], 100, 0, 0, 1.5), Result(scale_in[1], 50, 1, 2, 4.0)]
    for r in ran:
        campaign.save(r, tmp_path)
    campaign.save(ran[0], tmp_path)  # a second run of one case
    loaded = campaign.load(tmp_path)
    assert sorted(loaded, key=lambda r: r.operations) == sorted([*ran, ran[0]], key=lambda r: r.operations)
    upgrade = Case(campaign.UPGRADE, campaign.NO_FAULT, campaign.ETCD, campaign.ASTS)
    roll = Case(campaign.ROLL, campaign.NO_FAULT, campaign.XLINE, campaign.ASTS)
    rows = campaign.table([*scale_in, upgrade, roll], loaded).splitlines()
    assert rows[2] == f"| {campaign.SCALE_IN} | {campaign.OPERATOR_KILLED} | etcd | 3 | 250 | 1 | 2 | 4.0 s |"
    assert rows[3] == f"| {campaign.UPGRADE} | none | etcd | 0 (not run yet) | | | | |"
    assert rows[4] == f"| {campaign.ROLL} | none | xline | 0 (not run yet) | | | | |"


def test_the_table_replaces_only_what_lies_between_its_markers(tmp_path: Path) -> None:
    doc = tmp_path / "robustness.md"
    doc.write_text(f"before\n{campaign.BEGIN}\nold\n{campaign.END}\nafter\n")
    campaign.write_table(doc, "new")
    assert doc.read_text() == f"before\n{campaign.BEGIN}\nnew\n{campaign.END}\nafter\n"

"""report.html as a person reads it: clock times, one time axis, a summary table,
sentences instead of empty tables, AMO losses shown."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from marshal_workers.audit import report
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, AuditResult, FileInput
from marshal_workers.audit.synthetic import Fleet, generate

FLEET = Fleet(partitions=4, clients=3, coord_partitions=2, amo=True, batch=5, seed=11,
              lose_rate=0.01)  # fmt: skip


@pytest.fixture(scope="module")
def audited() -> AuditResult:
    syn = generate(3000, FLEET, with_ledger=True)
    config = AuditConfig(FileInput(Path("synthetic.jsonl")), Path("-"), FLEET.hb_ms)
    result, _ = run_local(syn.records, config, syn.ledger)
    assert result.tables["amo_losses"], "the fleet should lose some reserved batches"
    return result


def text_of(page: str) -> str:
    """The page without its inlined images."""
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)


class TestTimes:
    def test_no_epoch_milliseconds_on_the_page(self, audited: AuditResult) -> None:
        """Times are clock times and seconds since the log's start, never Unix ms or s."""
        page = text_of(report.render(audited))
        assert not re.search(r"\b1[0-9]{12}\b", page), re.search(r".{80}\b1[0-9]{12}\b.{20}", page)
        assert not re.search(r"\b1[0-9]{9}\.[0-9]+", page)  # ledger times in Unix seconds
        assert "22:13:20.000" in page  # the log's start (T0), as a clock time
        assert re.search(r"22:1[345]:[0-9]{2}\.[0-9]{3} \(\+[0-9.]+ s\)", page)

    def test_violations_and_their_evidence_show_clock_times(self) -> None:
        """A zombie write: its row and evidence (claim intervals, ledger times) read as
        clock times too."""
        syn = generate(3000, FLEET, with_ledger=True)
        first = syn.ledger[0]
        late = syn.ledger[-1].start + 1.0
        bad = first._replace(offset=first.offset + 100_000, start=late, end=late + 0.01)
        config = AuditConfig(FileInput(Path("synthetic.jsonl")), Path("-"), FLEET.hb_ms)
        result, _ = run_local(syn.records, config, [*syn.ledger, bad])
        assert [v[0] for v in result.violations] == ["zombie_work"]
        page = text_of(report.render(result))
        assert "Violations (1)" in page
        assert not re.search(r"\b1[0-9]{12}\b", page)
        assert not re.search(r"\b1[0-9]{9}\.[0-9]+", page)

    def test_every_time_chart_has_one_axis_of_seconds_since_the_start(
        self, audited: AuditResult
    ) -> None:
        """Timeline and lag share one axis: seconds since the log's start, same range."""
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415

        figures: list[Any] = [report.timeline_figure(audited, plt), report.lag_figure(audited, plt)]
        limits = []
        for fig in figures:
            assert fig is not None and len(fig.axes) == 1, "one axis per chart (no legend axes)"
            ax = fig.axes[0]
            assert "seconds since" in ax.get_xlabel() and "22:13:20" in ax.get_xlabel()
            assert ax.get_xaxis().get_offset_text().get_text() == ""
            limits.append(tuple(round(x, 3) for x in ax.get_xlim()))
        plt.close("all")
        assert limits[0] == limits[1]
        assert limits[0][0] <= 0 and limits[0][1] > 60


class TestTables:
    def test_the_summary_is_a_table_not_a_json_dump(self, audited: AuditResult) -> None:
        page = report.render(audited)
        assert "<pre>" not in page and '"report": null' not in page
        summary = page.split("<h2>Summary</h2>", 1)[1].split("<h2>", 1)[0]
        assert summary.startswith("<table") and "<th>Records</th><td>3000</td>" in summary

    def test_an_empty_violations_table_is_a_sentence(self, audited: AuditResult) -> None:
        page = report.render(audited)
        assert "Violations (0)" not in page
        assert "No violations: " in page

    def test_amo_losses_are_shown_with_their_cause(self, audited: AuditResult) -> None:
        page = report.render(audited)
        losses = audited.tables["amo_losses"]
        assert f"AMO losses ({len(losses)})" in page
        assert "taken_over" in page and "nobody handled it" in page
        clean = replace(audited, tables={**audited.tables, "amo_losses": []})
        assert "No AMO losses" in report.render(clean)


class TestAReader:
    """What a person found confusing on a real fleet's report (a --group audit of a topic
    another group used first, an ALO group, the tables' headings)."""

    def test_time_columns_are_headed_without_ms(self, audited: AuditResult) -> None:
        """A heading "start_ms" over "22:13:23.520 (+3.52 s)" reads as a mistake."""
        page = text_of(report.render(audited))
        headings = re.findall(r"<th>([^<]*)</th>", page)
        assert "start" in headings and "claimed" in headings and "duration" in headings
        assert not [h for h in headings if h.endswith("_ms")], headings

    def test_times_count_from_the_first_claim_shown_not_the_logs_first_record(
        self, audited: AuditResult
    ) -> None:
        """An hour of another group's records before the first claim shown: the charts do
        not start with an hour of nothing, and the Log row still gives the whole log."""
        i = report.columns("coordination").index("first_log_time_ms")
        earlier = [
            (*r[:i], int(r[i]) - 3_600_000, *r[i + 1 :]) for r in audited.tables["coordination"]
        ]
        shifted = replace(audited, tables={**audited.tables, "coordination": earlier})
        clock = report.Clock.of(shifted)
        assert clock.start_ms == report.Clock.of(audited).start_ms
        assert clock.span_s() < 3600
        page = text_of(report.render(shifted))
        assert "seconds since the first claim shown" in page
        assert "21:13:20.000 to" in page  # the Log row: from the log's first record

    def test_an_alo_audit_says_it_has_no_amo_group(self, audited: AuditResult) -> None:
        m = report.columns("groups").index("mode")
        alo = [(*r[:m], "alo", *r[m + 1 :]) for r in audited.tables["groups"]]
        clean = replace(audited, tables={**audited.tables, "groups": alo, "amo_losses": []})
        assert "no group in this audit runs at most once" in report.render(clean)
        unchecked = text_of(report.render(replace(clean, check=None)))  # no ledger given
        assert "<h2>AMO losses</h2>" in unchecked and "at risk" not in unchecked


class TestFiguresAndSpan:
    def test_every_image_has_alt_text_and_a_caption(self, audited: AuditResult) -> None:
        """Each chart is a figure: an image with alt text that says what it shows, and a
        caption that says how to read it."""
        page = report.render(audited)
        figures = re.findall(r"<figure>(.*?)</figure>", page, flags=re.S)
        images = re.findall(r"<img [^>]*>", page)
        assert len(images) == len(figures) >= 3
        for fig in figures:
            alt = re.search(r"<img [^>]*alt='([^']+)'", fig)
            caption = re.search(r"<figcaption>(.+?)</figcaption>", fig, flags=re.S)
            assert alt is not None and len(alt.group(1)) > 20, fig[:200]
            assert caption is not None and len(caption.group(1)) > 20

    def test_the_timeline_of_a_selected_group_spans_its_time_not_the_logs(
        self, audited: AuditResult
    ) -> None:
        """--group G on a log that other groups go on writing to for an hour after G stopped:
        the charts end at G's last claim, not an hour later."""
        from marshal_workers.audit.tables import Window  # noqa: PLC0415

        cols = report.columns("claims")
        end_i, hb_i = cols.index("end_ms"), cols.index("last_heartbeat_ms")
        ended = [(*r[:end_i], r[end_i] if r[end_i] is not None else r[hb_i], *r[end_i + 1 :])
                 for r in audited.tables["claims"]]  # fmt: skip
        assert audited.end_ms is not None
        later = replace(
            audited,
            end_ms=audited.end_ms + 3_600_000,
            tables={**audited.tables, "claims": ended},
            config=replace(audited.config, window=Window(group=FLEET.group)),
        )
        clock = report.Clock.of(later)
        assert clock.end_ms == max(int(r[end_i]) for r in ended)
        assert clock.span_s() < 600
        assert report.Clock.of(replace(later, config=audited.config)).span_s() > 3600

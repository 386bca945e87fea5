"""The study report on a phone and at a glance: a viewport, no empty note column, a setup that does not fit
drawn as a labelled stub, and the socket transport named beside the Ethernet figure it caps."""

from __future__ import annotations

from topowise.report.render import to_html, to_markdown
from topowise.report.whatif import HEADERS, socket_capped, with_socket_cap


def test_html_has_a_viewport_and_scrolls_wide_tables():
    page = to_html([("table", ["a", "b"], [["1", "2"]])], "t")
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "overflow-x:auto" in page


def test_socket_cap_is_said_beside_the_figure():
    assert socket_capped("eth-100") and socket_capped("eth-400") and socket_capped("eth-100x2")
    assert not socket_capped("eth-25") and not socket_capped("eth-10")  # the line sets these
    assert not socket_capped("ib-ndr") and not socket_capped("roce-400")
    row = ["eth-100", "1", "4", "zero2"] + ["-"] * (len(HEADERS) - 4)
    ib = ["ib-ndr", "8", "384", "zero2"] + ["-"] * (len(HEADERS) - 4)
    rows, capped = with_socket_cap(HEADERS, [ib, row])
    assert capped and rows[1][2] == "4 (socket cap)" and rows[0][2] == "384"
    assert with_socket_cap(["x"], [["eth-100"]]) == ([["eth-100"]], False)


def _tiny_study():
    from topowise.models.spec import load_model
    from topowise.report import study as st
    from topowise.topology import load_topology

    return st.run_study(load_model("tiny"), [("h100-nvl-8", load_topology("h100-nvl-8"))], seq_len=256,
                        question_models=())


def test_placement_tables_drop_an_empty_note_column():
    from dataclasses import replace

    from topowise.report.render import placement_table

    study = _tiny_study()
    topo = study.topologies[0]
    _, headers, rows = placement_table(study, topo)
    assert "note" not in headers and all(len(r) == len(headers) for r in rows)
    broken = replace(study, cases=tuple(replace(c, error="no prediction: why") if i == 0 else c
                                        for i, c in enumerate(study.cases)))
    _, headers, rows = placement_table(broken, topo)
    assert headers[-1] == "note" and rows[0][-1] == "no prediction: why"
    assert "| note |" in to_markdown([placement_table(broken, topo)])


def test_a_bar_that_does_not_fit_is_a_labelled_stub():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from topowise.report.plots import STUB, _grouped_bars

    values = {("a", "ddp"): 900.0, ("a", "zero3"): 500.0, ("b", "ddp"): 1000.0, ("b", "zero3"): 400.0}
    fig, ax = plt.subplots()
    _grouped_bars(ax, ["a", "b"], ("ddp", "zero3"), lambda g, s: values[(g, s)],
                  hatch_if=lambda g, s: s == "ddp", stub=True)
    ddp, zero3 = ax.containers
    assert [b.get_height() for b in zero3] == [500.0, 400.0]
    assert all(b.get_height() == STUB * 500.0 and b.get_hatch() for b in ddp)  # not 900 or 1000
    assert [t.get_text() for t in ax.texts] == ["does not fit", "does not fit"]
    plt.close(fig)

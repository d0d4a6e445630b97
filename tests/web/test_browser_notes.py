"""The viewer says where a trn3 profile's figures rest on assumed hardware numbers: a note in the title bar
(the full list in its tooltip) and the list on the Summary tab; trn1 profiles show neither."""

from __future__ import annotations

from tests.web.conftest import open_profile, shot


def test_trn3_profile_names_its_assumed_figures(page, server):
    note = server.api(f"/api/profiles/{server.ids['trn3']}")["assumptions"]
    assert note and "DMA fixed latency" in note
    open_profile(page, server, "trn3", "?tab=summary")
    title = page.locator("#assumed-note")
    assert "assumed hardware figures" in title.inner_text() and title.get_attribute("title") == note
    page.wait_for_selector("#assumed-figures")
    assert page.inner_text("#assumed-figures") == note
    shot(page, "summary-trn3")


def test_trn1_profile_has_no_assumed_figures_note(page, server):
    open_profile(page, server, "tiny", "?tab=summary")
    page.wait_for_selector("#verdict")
    assert page.locator("#assumed-note").count() == 0 and page.locator("#assumed-figures").count() == 0

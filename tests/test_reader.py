"""What a reader sees (issue 34): each device's own state, a way to act, search by a pasted error.

* One table of a device's states (:data:`tipsite.sphinxext.vocabulary.STATES`): the words, the
  tokens, the labels (an older tip version named so, with its date; "not measured: machine busy";
  "not applicable"); a card's classes carry each device's state and verdict together.
* A takeaway types no number about the tip's own measurement.
* Pasted error lines: the words the search keeps (``search.pasted_words``, the same rules as
  ``tips_search.js``), and each tip's declared lines are torch's own messages: the ones a CPU
  can raise are raised here and compared.
* A tiny site: the page of tips without a current result, the repository link in every footer,
  "Report a wrong verdict" opening a prefilled new issue, the declared lines on the tip page.

The browser checks (pasted lines in the search box, the filter, phones and dark mode) are in
tests/test_search.py and tests/test_browser.py.
"""

from __future__ import annotations

import re
import urllib.parse
import warnings

import pytest
from conftest import make_tip, page_text

from conf import settings
from tipsite import records, tipmeta
from tipsite.sphinxext import cards, search, state, view
from tipsite.sphinxext.view import DeviceView

RECORD = {"date": "2026-11-20 10:00 UTC", "hosts": {}, "torch": "2.13.0"}


def _device(state_key: str, verdict: str | None = "holds", device: str = "cuda") -> DeviceView:
    decision = {"verdict": verdict} if verdict else None
    return DeviceView(device, state_key, decision=decision, record=RECORD if decision else None)


# --- one table of states ---------------------------------------------------------------------------

def test_one_table_names_every_state_and_its_token_spells_its_word():
    assert set(state.STATES) == {"measured", "stale", "not measured", "not applicable"}
    for key, row in state.STATES.items():
        assert row["token"] == row["word"].replace(" ", "-"), key
        assert row["meaning"].strip(), key
    assert view.STATE_WORDS == {k: v["word"] for k, v in state.STATES.items()}


def test_labels_say_each_devices_own_state():
    assert _device("measured").label == "holds" and _device("measured").token == "holds"
    older = _device("stale", "wrong")
    assert older.label == "wrong, older tip version (2026-11-20)"
    assert older.token == "older-tip-version" and older.verdict == "wrong"
    assert _device("not measured", None).label == "not measured"
    assert DeviceView("cuda", "not applicable").label == "not applicable"
    busy = _device("measured", state.BUSY)
    assert busy.state == "not measured" and busy.verdict is None
    assert busy.label == "not measured: machine busy" and busy.token == "not-measured"


def test_a_card_carries_each_devices_state_and_verdict_together():
    tip = next(t for t in tipmeta.read_all() if t.devices == ("cpu",))
    devices = {"cpu": _device("stale", "wrong", "cpu")}
    tip_view = view.TipView(tip=tip, record=None, devices=devices, columns=[])
    classes = tip_view.card_classes()
    assert "tc-d-cpu-older-tip-version-wrong" in classes
    assert "tc-d-cuda-not-applicable-none" in classes  # CUDA is not a device this tip runs on
    assert not [c for c in classes if c.startswith("tc-verdict-")], "a verdict of no device"
    words = cards.filter_words()
    assert words["state"]["older-tip-version"] == "older tip version"
    assert state.BUSY not in words["verdict"]


def test_the_page_that_explains_the_site_takes_its_state_words_from_the_table():
    text = (settings.DOCS_DIR / "how_built.rst").read_text(encoding="utf-8")
    assert ".. tips-states::" in text
    for retired in ("not yet measured", "*stale*", '"older version"', "STATE_WORDS"):
        assert retired not in text, retired


# --- measured prose ----------------------------------------------------------------------------------

_NUMBER = re.compile(r"^[\d.,]+\+?[a-zA-Z%µ]{0,3}$")


def typed_numbers(tip: tipmeta.Tip) -> list[str]:
    """The numbers a takeaway types: a digit that is not part of a name (float16, AVX512-BF16,
    [B,1]), not a torch release (``torch 2.4+``, ``since 2.6``) and not stated by the claim the
    tip examines (``multiples of 8``)."""
    claims = tipmeta.claims()
    claim_text = " ".join([tip.statement or "", *(claims[c]["claim"] + " " + claims[c]["quote"]
                                                   for c in tip.claims if c in claims)])
    words = tip.takeaway.split()
    found = []
    for i, raw in enumerate(words):
        core = raw.strip("()[]{},.;:!?\"'")
        if not re.search(r"\d", core) or not _NUMBER.match(core):
            continue
        before = words[i - 1].lower().strip("(") if i else ""
        if before in ("torch", "since", "pytorch") and re.fullmatch(r"\d+\.\d+\+?", core):
            continue
        if re.search(rf"(?<![\d.]){re.escape(core.rstrip('x+'))}(?![\d.])", claim_text):
            continue
        found.append(core)
    return found


def test_no_takeaway_types_a_number_about_its_own_measurement():
    """A number about a tip's own measurement is on its page from its records (the cards' key
    figure); the takeaway, typed once and shown on every card, holds none (the compile tip's
    "the first call compiles for seconds" read 0.06 s on the CPU that built it)."""
    tips = tipmeta.read_all()
    typed = {t.name: typed_numbers(t) for t in tips}
    assert not {k: v for k, v in typed.items() if v}, typed
    assert "seconds" not in next(t for t in tips if t.name == "tip_torch_compile").takeaway


def test_typed_numbers_are_found():
    tip = next(t for t in tipmeta.read_all() if t.name == "tip_torch_compile")
    fake = tipmeta.Tip(**{**tip.__dict__, "takeaway": "It compiles in 2.5 s, 3x faster; torch 2.4+ ok."})
    assert typed_numbers(fake) == ["2.5", "3x"]


# --- pasted error lines -------------------------------------------------------------------------------

# Lines as torch printed them. The CUDA ones come from readers' logs: the device check of torch's
# TensorIterator (c10 adaption.cpp: "Expected all tensors to be on the same device, but found at
# least two devices, {a} and {b}!") and the caching allocator's out-of-memory message.
PASTED = {
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:1 and cuda:0!": "tip_tensors_in_forward",
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cpu and cuda:0! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)":
        "tip_tensors_in_forward",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total "
    "capacity of 47.53 GiB of which 16.88 MiB is free. Process 3652628 has 47.51 GiB memory in use. "
    "Of the allocated memory 47.14 GiB is allocated by PyTorch, and 57.79 MiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)":
        "tip_expandable_segments",
    "RuntimeError: CUDA error: out of memory": "tip_oom_retry",
}


def test_a_pasted_line_keeps_its_words_not_its_numbers_paths_or_devices():
    words = search.pasted_words(
        "  File \"/home/me/train.py\", line 12, in forward\nRuntimeError: Expected all tensors to "
        "be on the same device, but found at least two devices, cuda:0 and cpu! at 0x7f3a2b4c")
    assert words == "expected tensors same device devices cuda cpu"
    assert not re.search(r"\d", search.pasted_words(list(PASTED)[2]))


@pytest.mark.parametrize("line", list(PASTED))
def test_the_explaining_tip_declares_every_word_a_pasted_line_keeps(line):
    tip = next(t for t in tipmeta.read_all() if t.name == PASTED[line])
    declared = set(" ".join(search.pasted_words(e) for e in tip.errors).split())
    missing = set(search.pasted_words(line).split()) - declared
    # a reader's line may differ in a word or two (a newer torch, another op): the search then
    # drops words from the end until pages match; the words that name the error must be there
    assert len(missing) <= 2, (tip.name, missing)


def _raised(fn) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - any error torch raises is the text under test
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("raised nothing")


def _warned(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [f"{w.category.__name__}: {w.message}" for w in caught]


def torch_messages() -> dict[str, list[str]]:
    """What torch itself says on this CPU, for the tips whose declared lines a CPU can raise."""
    import io

    import torch

    def deterministic():
        torch.use_deterministic_algorithms(True)
        try:
            torch.zeros(3).put_(torch.tensor([0]), torch.ones(1))
        finally:
            torch.use_deterministic_algorithms(False)

    def inference():
        with torch.inference_mode():
            x = torch.ones(2)
        w = torch.ones(2, requires_grad=True)
        torch.mul(w, x)

    class TrainConfig:
        pass

    TrainConfig.__module__, TrainConfig.__qualname__ = "__main__", "TrainConfig"

    def weights_only():
        import __main__

        __main__.TrainConfig = TrainConfig
        try:
            buf = io.BytesIO()
            torch.save({"config": TrainConfig()}, buf)
            buf.seek(0)
            torch.load(buf, weights_only=True)
        finally:
            delattr(__main__, "TrainConfig")

    def anomaly():
        with torch.autograd.detect_anomaly():
            pass

    return {
        "tip_dataloader_persistent_workers": [_raised(
            lambda: torch.utils.data.DataLoader([1], persistent_workers=True))],
        "tip_deterministic_algorithms": [_raised(deterministic)],
        "tip_inference_mode": [_raised(inference)],
        "tip_weights_only_load": [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip()
                                  for ln in _raised(weights_only).splitlines()],
        "tip_map_location": [_raised(lambda: torch.serialization.default_restore_location(
            torch.UntypedStorage(1), "cuda:0"))],
        "tip_jit_script_vs_compile": _warned(lambda: torch.jit.script(torch.nn.Identity())),
        "tip_mixed_precision": _warned(lambda: torch.cuda.amp.GradScaler())
        + _warned(lambda: torch.cuda.amp.autocast().__enter__()),
        "tip_anomaly_detection_off": _warned(anomaly),
    }


def test_declared_lines_are_what_torch_itself_says():
    """Each declared line a CPU can raise is torch's own: the same text, or its start."""
    said = torch_messages()
    tips = {t.name: t for t in tipmeta.read_all()}
    checked = 0
    for name, messages in said.items():
        for line in tips[name].errors:
            if "cuda:0" in line or line.startswith("torch.OutOfMemoryError"):
                continue
            cls, _, text = line.partition(": ")
            cls = cls.rsplit(".", 1)[-1]
            ok = [m for m in messages
                  if m.startswith(f"{cls}: ") and (m.partition(": ")[2].startswith(text)
                                                   or text.startswith(m.partition(": ")[2]))
                  or m.startswith(line)]
            assert ok, f"{name}: {line!r} is not what torch says: {messages}"
            checked += 1
    assert checked >= 9, checked


def test_every_declared_line_reaches_the_search_words():
    for tip in tipmeta.read_all():
        for line in tip.errors:
            assert search.pasted_words(line), (tip.name, line)


# --- a tiny site: acting on it -----------------------------------------------------------------------

ERRORS = ('# sphinx_gallery_tips_errors = ["RuntimeError: Expected all tensors to be on the same '
          'device, but found at least two devices, cuda:0 and cpu!"]')


def test_a_tip_page_lets_the_reader_act_and_the_site_lists_what_is_not_current(tiny_build):
    result = tiny_build({"correctness/tip_tiny.py": make_tip(
        __import__("conftest").GOOD_BODY, extra_meta=ERRORS)})
    assert result.returncode == 0, result.output[-3000:]
    page = result.page("correctness", "tip_tiny")
    repo = settings.repo_url()
    # the repository in the footer of every page
    for html in (page, (result.html / "index.html").read_text(encoding="utf-8")):
        assert f'href="{repo}"' in html and "tips-repo-link" in html
    # "Report a wrong verdict": a new issue with the tip and its record filled in
    link = re.search(r'href="([^"]+/issues/new\?[^"]+)"[^>]*>\s*Report a wrong verdict', page)
    assert link, "no report link"
    query = urllib.parse.parse_qs(urllib.parse.urlparse(link.group(1).replace("&amp;", "&")).query)
    assert query["title"] == ["Verdict of tip_tiny looks wrong"]
    body = query["body"][0]
    assert "tip_tiny" in body and "CPU: holds" in body and "torch" in body and "Tip version" in body
    # the declared line: shown, and indexed in the words a pasted line keeps
    text = page_text(page)
    assert "Errors and warnings this tip explains" in text
    assert "Expected all tensors to be on the same device" in text
    assert "expected tensors same device devices cuda cpu" in page
    # each device's own state on the card: CPU current, CUDA not applicable
    home = (result.html / "index.html").read_text(encoding="utf-8")
    assert "tc-d-cpu-current-holds" in home and "tc-d-cuda-not-applicable-none" in home
    # the home page counts them per device and machine class, and links the list of the others
    summary = page_text(home)
    assert "What is current. CPU: 1 of 1 tips have a current result (" in summary, summary[:600]
    assert "CUDA:" not in summary.split("What is current.")[1].split("The tips without")[0]
    assert 'href="generated/not_current.html"' in home
    # the list of tips without a current result: none here, and it says so
    missing = page_text((result.html / "generated" / "not_current.html").read_text(encoding="utf-8"))
    assert "Every tip that runs on CPU has a current result." in missing


def test_the_repository_is_set_in_one_place(monkeypatch):
    monkeypatch.delenv("TIPS_REPO_URL", raising=False)
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    assert settings.repo_url() == settings.REPOSITORY_URL
    monkeypatch.setenv("TIPS_REPO_URL", "https://example.org/a/b/")
    assert settings.repo_url() == "https://example.org/a/b"


def test_the_contribute_page_gives_the_steps_of_contributing_md():
    page = (settings.DOCS_DIR / "contribute.rst").read_text(encoding="utf-8")
    guide = (settings.ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for step in ("python -m tipsite.contribute all", "nox -s vet -- FILE",
                 "python -m tipsite.records vet FILE", "pull request",
                 "docs/_data/results/contrib-<machine>-torch<version>-<date>.json"):
        assert step in page and step in guide, step
    assert "contribute" in (settings.DOCS_DIR / "index.rst").read_text(encoding="utf-8")


def test_the_home_page_counts_current_results_per_device_and_machine_class():
    cpu = {"hosts": {"cpu": {"name": "x", "cpu_model": "Zen", "cores": 2}}, "date": "2026-11-20"}
    gpu = {"hosts": {"cuda": {"name": "H200"}}, "date": "2026-11-19"}
    tips = [t for t in tipmeta.read_all() if set(t.devices) == {"cpu", "cuda"}][:3]
    views = {}
    for i, tip in enumerate(tips):
        devices = {"cpu": DeviceView("cpu", "measured", {"verdict": "holds"}, cpu),
                   "cuda": (DeviceView("cuda", "stale", {"verdict": "wrong"}, gpu) if i
                            else DeviceView("cuda", "not measured"))}
        views[tip.name] = view.TipView(tip=tip, record=None, devices=devices, columns=[])
    data = {d["device"]: d for d in cards.currency_data(views)}
    assert (data["cpu"]["runs"], data["cpu"]["current"]) == (3, 3)
    assert (data["cuda"]["current"], data["cuda"]["stale"], data["cuda"]["not_measured"]) == (0, 2, 1)
    (gpu_class,) = data["cuda"]["classes"]
    assert gpu_class["name"] == records.machine_class(gpu, "cuda") and gpu_class["stale"] == 2
    assert len(data["cuda"]["missing"]) == 3 and not data["cpu"]["missing"]
    assert "older tip version (2026-11-19)" in data["cuda"]["missing"][-1]["badge"]


def test_the_header_names_each_devices_own_state():
    """An older tip version's verdict with its date, a busy run as not measured, a device the tip
    does not run on as not applicable (the search filter), and the report link prefilled."""
    from tipsite.sphinxext import pages

    tip = next(t for t in tipmeta.read_all() if t.name == "tip_tensors_in_forward")
    rec = {**RECORD, "hosts": {"cuda": {"name": "NVIDIA H200"}}, "verdicts": {}}
    devices = {"cpu": DeviceView("cpu", "measured", {"verdict": state.BUSY}, rec),
               "cuda": DeviceView("cuda", "stale", {"verdict": "wrong"}, rec)}
    head = pages.header(view.TipView(tip=tip, record=None, devices=devices, columns=[]),
                        compat_page=False)
    assert "**CPU:** :tip-state:`not measured: machine busy <not-measured>`" in head
    assert "**CUDA:** :tip-state:`wrong, older tip version (2026-11-20) <older-tip-version>`" in head
    assert 'data-pagefind-filter="cuda:wrong, older tip version"' in head
    assert 'data-pagefind-filter="cpu:not measured"' in head
    assert f"{settings.repo_url()}/issues/new?title=Verdict+of+tip_tensors_in_forward+looks+wrong" in head
    assert "older version" not in head.replace("older tip version", "")

"""Check a reader's code against the tips' evidence (``torch-tips PATH...``, ``nox -s check``).

The rules (:mod:`tipsite.checker.registry`, pure data) each name the tip whose verdict judges
them; the visitors (:mod:`tipsite.checker.visitors`) find them with libcst, on TorchFix's
machinery; the engine (:mod:`tipsite.checker.engine`) runs them fast, over the files
:mod:`tipsite.checker.runner` finds; the evidence (:mod:`tipsite.checker.evidence`) picks each
tip's verdict for the reader's torch and device from the data shipped with the checker
(generated from the result records by :mod:`tipsite.checker.shipdata`); the configuration is
:mod:`tipsite.checker.config` and the command line :mod:`tipsite.checker.cli`. The measured
precision on labelled real code is :mod:`tipsite.checker.labels`'s (docs/reference/checker.rst).
"""

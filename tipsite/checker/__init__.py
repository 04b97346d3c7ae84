"""Check a reader's code against the tips' evidence (``nox -s check -- PATH...``).

The rules (:mod:`tipsite.checker.registry`, pure data) each name the tip whose verdict judges
them; the visitors (:mod:`tipsite.checker.visitors`) find them with libcst, on TorchFix's
machinery; the engine (:mod:`tipsite.checker.engine`) runs them fast; the evidence
(:mod:`tipsite.checker.evidence`) picks each tip's verdict for the reader's torch and device from
the result records; the command line is :mod:`tipsite.checker.cli`.
"""

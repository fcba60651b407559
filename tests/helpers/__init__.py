"""Code the tests share: files built byte by byte, the malformed corpus, the command's runner,
the real servers of the remote tests, comparisons. Imported as ``from helpers.x import ...``
(``tests`` is on ``sys.path`` through pyproject's ``pythonpath``)."""

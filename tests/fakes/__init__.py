"""The tests' shared fakes: rules (``rules.py``) and upstreams (``upstreams.py`` and the
scripted servers beside it). A test that needs a fake takes it from here."""

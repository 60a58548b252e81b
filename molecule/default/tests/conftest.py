"""The default scenario's test order: test_uninstall.py removes what site.yml installed, so it runs after every
other test of the scenario (pytest would otherwise order the files by name)."""

LAST = "test_uninstall.py"


def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    items.sort(key=lambda item: item.path.name == LAST)   # stable: every other test keeps its place

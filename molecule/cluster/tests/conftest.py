"""The cluster scenario's test order: test_triangle.py re-cables the nodes (spark-worker3 leaves, the other three in a
triangle), so it runs after every test of the four nodes behind the switch (pytest would order the files by name)."""

LAST = "test_triangle.py"


def pytest_collection_modifyitems(session, config, items):  # pylint: disable=unused-argument
    items.sort(key=lambda item: item.path.name == LAST)   # stable: every other test keeps its place

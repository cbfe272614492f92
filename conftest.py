"""pytest hooks shared by the unit tests and nbval."""


def pytest_collectstart(collector):
    # Warnings printed by libraries (stderr) differ between versions; the lesson's content is stdout.
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)

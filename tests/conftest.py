import os

os.environ.setdefault("SECINFER_TESTING", "1")

pytest_plugins = ["conformance.mutation_plugin"]

pytest_plugins = ["conformance.mutation_plugin"]

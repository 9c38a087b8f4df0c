from django.apps import AppConfig


class BenchConfig(AppConfig):
    """The benchmarks and the demo: `manage.py bench WORKLOAD` and `manage.py setup_demo` are its commands.

    It has no models. It uses the engine the way any door does (runs.enqueue for
    runs); nothing in the engine, the surfaces or the project imports it.
    """

    name = "bench"
    verbose_name = "Benchmarks and the demo"

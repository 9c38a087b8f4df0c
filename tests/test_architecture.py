"""The layers of docs/architecture.md, checked on the source: no import cycle
between modules (imports inside functions included), and the domain never
imports the HTTP or portal layers.

The graph is read with `ast`, not by importing, so a lazy import inside a
function counts exactly like one at the top of the module.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler_project", "jobs", "calendars", "runs", "dlq", "notify", "bench", "tasks_backend")
APPS = ("jobs", "calendars", "runs", "dlq", "notify", "tasks_backend")
# Subpackages of an app that are surfaces (leaves) rather than its domain.
SURFACES = ("api", "admin", "management", "migrations")
WEB_ONLY = (
    "rest_framework",
    "drf_spectacular",
    "scheduler_project.api",
    "scheduler_project.admin",
    "django.contrib.admin",
)


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules():
    """{module name: path} of every project module, migrations left out."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[module_name(path)] = path
    return found


def imported_names(path, name):
    """Every dotted name the module imports, at any depth, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from runs import transitions` names a module; `from runs.models import Run` a symbol.
            yield from (f"{base}.{alias.name}" for alias in node.names)
            yield base


def import_graph():
    """{module: set of project modules it imports}."""
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target in imported_names(path, name):
            # The longest project module that the dotted name starts with.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def external_imports(path, name):
    return set(imported_names(path, name))


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(name):
    """(app, surface) of a module: surface is api, admin, ... or None for the domain."""
    parts = name.split(".")
    surface = parts[1] if len(parts) > 1 and parts[1] in SURFACES else None
    return parts[0], surface


def test_it_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_it_finds_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("app", APPS)
def test_it_keeps_http_and_portal_out_of_the_domain(app):
    offenders = []
    for name, path in project_modules().items():
        owner, surface = layer(name)
        if owner != app or surface is not None:
            continue
        for target in external_imports(path, name):
            if target.startswith(WEB_ONLY) or layer(target)[1] in ("api", "admin"):
                offenders.append(f"{name} imports {target}")
    assert not offenders, "\n".join(sorted(set(offenders)))


@pytest.mark.parametrize("surface", ["api", "admin"])
def test_it_keeps_each_surface_a_leaf(surface):
    """No app's api imports another app's api (the same for admin), and no domain module imports either."""
    graph = import_graph()
    offenders = []
    for name, targets in graph.items():
        owner, own_surface = layer(name)
        if owner not in APPS:
            continue  # the project's wiring (urls, asgi) joins the surfaces
        for target in targets:
            target_owner, target_surface = layer(target)
            if target_surface == surface and target_owner in APPS and target_owner != owner:
                offenders.append(f"{name} imports {target}")
    assert not offenders, "\n".join(sorted(set(offenders)))


def test_it_keeps_the_shared_plumbing_free_of_app_surfaces():
    """scheduler_project's api and admin plumbing import no app's api or admin: apps register themselves."""
    offenders = []
    for name, targets in import_graph().items():
        if not name.startswith(("scheduler_project.api", "scheduler_project.admin")):
            continue
        offenders += [f"{name} imports {t}" for t in targets if layer(t)[0] in APPS and layer(t)[1] in ("api", "admin")]
    assert not offenders, "\n".join(sorted(set(offenders)))


def test_it_keeps_the_tasks_backend_above_the_engine():
    """tasks_backend uses jobs and runs (Django's Tasks framework on top); the engine never imports it."""
    offenders = [
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if layer(name)[0] in ("jobs", "runs", "dlq", "notify")
        for target in targets
        if layer(target)[0] == "tasks_backend"
    ]
    assert not offenders, "\n".join(sorted(offenders))


def test_it_keeps_calendars_between_jobs_and_runs():
    """jobs <- calendars <- runs: the windows' domain uses jobs only, and jobs never asks calendars."""
    offenders = []
    for name, targets in import_graph().items():
        owner, surface = layer(name)
        if surface is not None:
            continue
        for target in targets:
            target_owner = layer(target)[0]
            if owner == "calendars" and target_owner in ("runs", "dlq", "notify", "tasks_backend"):
                offenders.append(f"{name} imports {target}")
            if owner == "jobs" and target_owner == "calendars":
                offenders.append(f"{name} imports {target}")
    assert not offenders, "\n".join(sorted(offenders))


# Rule 5: the models point one way. An app's domain imports only its own app and the apps to its left;
# these edges to the right are the named exceptions (docs/architecture.md, rule 5), and no other.
MODELS_ORDER = ("jobs", "calendars", "runs", "dlq", "notify")
RIGHTWARD_EDGES = {
    ("runs.transitions", "dlq.models"),
    ("runs.metrics", "dlq.models"),
    ("runs.retention", "dlq.models"),
    ("runs.scheduler", "notify"),
    ("runs.scheduler", "notify.notifier"),
}


def rightward_imports(graph):
    found = set()
    for name, targets in graph.items():
        owner, surface = layer(name)
        if surface is not None or owner not in MODELS_ORDER:
            continue
        for target in targets:
            target_owner = layer(target)[0]
            if target_owner in MODELS_ORDER and MODELS_ORDER.index(target_owner) > MODELS_ORDER.index(owner):
                found.add((name, target))
    return found


def test_it_keeps_the_models_pointing_one_way():
    """Both directions of every pair: jobs imports none of calendars, runs, dlq, notify; dlq never notify; ..."""
    offenders = rightward_imports(import_graph()) - RIGHTWARD_EDGES
    assert not offenders, "\n".join(f"{name} imports {target}" for name, target in sorted(offenders))


def test_the_one_way_rule_catches_jobs_importing_runs_and_dlq_importing_notify():
    graph = {"jobs.quotas": {"runs.models"}, "dlq.models": {"notify.notifier"}, "runs.claims": {"jobs.models"}}
    assert rightward_imports(graph) == {("jobs.quotas", "runs.models"), ("dlq.models", "notify.notifier")}


def test_the_named_rightward_edges_still_exist():
    """An exception the code no longer needs is struck from the map (and from RIGHTWARD_EDGES)."""
    graph = import_graph()
    stale = {(name, target) for name, target in RIGHTWARD_EDGES if target not in graph.get(name, ())}
    assert not stale, stale


def test_only_runs_leases_writes_lease_rows():
    """Shard, node, retention and last-pass leases are all ShardLease rows: one module writes them."""
    import re

    write = re.compile(r"ShardLease(\(|\.objects\.[\w().=\",\s]*?\.(update|create|bulk_create|get_or_create|delete)\()")
    offenders = [
        name
        for name, path in project_modules().items()
        if name not in ("runs.leases", "runs.models") and write.search(path.read_text())
    ]
    assert not offenders, offenders


# Rule 7: the bench is an installed app on top of everything, imported by nothing but itself and the tests.
def test_the_bench_is_an_app_with_its_own_commands():
    from django.apps import apps
    from django.core.management import get_commands

    assert apps.get_app_config("bench").path == str(ROOT / "bench")
    commands = get_commands()
    assert commands["bench"] == "bench" and commands["setup_demo"] == "bench"
    assert not (ROOT / "runs" / "management" / "commands" / "bench.py").exists()


def outside_the_bench():
    """{module name: path} of every Python file of the repository but the bench's and the tests'."""
    found = {}
    for path in ROOT.rglob("*.py"):
        top = path.relative_to(ROOT).parts[0]
        if top in ("bench", "tests") or top.startswith("."):
            continue
        found[module_name(path)] = path
    return found


def test_nothing_but_the_bench_and_the_tests_imports_the_bench():
    offenders = [
        f"{name} imports {target}"
        for name, path in outside_the_bench().items()
        for target in imported_names(path, name)
        if target == "bench" or target.startswith("bench.")
    ]
    assert not offenders, "\n".join(sorted(set(offenders)))


# Rule 8: runs go in through runs/enqueue.py (and the two runs/sql queries it runs), nowhere else.
RUN_INSERT = re.compile(r"INSERT\s+INTO\s+runs_run\b", re.IGNORECASE)
BENCH_RUN_WRITE = re.compile(
    r"INSERT\s+INTO\s+runs_(run|readymark)\b|COPY\s+runs_(run|readymark)\b"
    r"|\b(Run|ReadyMark)\.objects\.(bulk_create|create|get_or_create|update_or_create)\(|_copy\(\s*(Run|ReadyMark)\b",
    re.IGNORECASE,
)


def sql_queries(path):
    """{query name: text} of a runs/sql dialect file."""
    parts = re.split(r"^-- name: (\w+)\s*$", path.read_text(), flags=re.MULTILINE)[1:]
    return dict(zip(parts[::2], parts[1::2]))


def test_only_runs_enqueue_inserts_runs():
    offenders = [
        name
        for name, path in project_modules().items()
        if name != "runs.enqueue" and RUN_INSERT.search(path.read_text())
    ]
    for path in (ROOT / "runs" / "sql").glob("*.sql"):
        offenders += [
            f"{path.name}: {query}"
            for query, text in sql_queries(path).items()
            if query not in ("insert_runs", "insert_fresh_run") and RUN_INSERT.search(text)
        ]
    assert not offenders, offenders


def test_the_bench_inserts_runs_only_through_runs_enqueue():
    """bench.setup.insert_runs, a task's .enqueue() or runs.enqueue.insert_selected: no INSERT, COPY or ORM create."""
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in (ROOT / "bench").rglob("*.py")
        for match in BENCH_RUN_WRITE.finditer(path.read_text())
    ]
    assert not offenders, "\n".join(offenders)


def test_the_bench_rule_catches_a_raw_insert_and_an_orm_create():
    text = 'cursor.execute("INSERT INTO runs_run (job_id) SELECT 1")\nRun.objects.bulk_create(rows)\n'
    assert [m.group(0) for m in BENCH_RUN_WRITE.finditer(text)] == ["INSERT INTO runs_run", "Run.objects.bulk_create("]

"""The docs as reference: every condition reason the operator can set is in a reason table, the
README stays a front door, and every relative link resolves.

The reasons are read from the code, not listed here: an AST scan of the package finds every
call that makes a condition reason (the status model `Condition`, the rollout's
`ConditionChange`, the model cache's `CacheState`, and any function that passes one of its own
parameters on as such a reason: `set_condition`, decide's `_ConditionWriter.put`, found by the
scan itself) and follows each reason argument to its string literals: through
`x if c else y`, `a or b`, `str(...)`, local assignments (tuple unpacking from a call
included), module constants and the return values of the package's own functions.
Two kinds of value reach a condition from elsewhere, and their sources are scanned as well:
a rollout failure's reason (`_Fail`, recorded as the revision's `cause`) and the download
program's result (`CacheFailure`, read back as `result.get("reason")`). An argument the scan
cannot follow fails the test, so a new way of setting a reason is noticed rather than missed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "llmservice_operator"
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
README_MAX_LINES = 250

#: Callables whose `reason` argument is a condition's reason (the functions that pass one of
#: their parameters on to them, such as `set_condition`, are found by the scan).
SINKS = ("Condition", "ConditionChange", "CacheState")
#: Values that reach a condition's reason from elsewhere: the attribute or key they arrive as,
#: and the callable whose `reason` argument they come from.
CARRIED = {"cause": "_Fail", "get:reason": "CacheFailure"}
#: An attribute that already holds a condition's reason (a Condition, a ConditionChange, a
#: CacheState, a _Fail): set where that object was made, which the scan covers.
PASSED_ON = "reason"


class Unresolved(Exception):
    """A reason argument the scan cannot follow to its literals."""


@dataclass
class Package:
    """The package's modules, parsed, and what the scan needs to look up."""

    modules: dict[Path, ast.Module] = field(default_factory=dict)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = field(default_factory=dict)
    classes: dict[str, list[ast.ClassDef]] = field(default_factory=dict)
    constants: dict[str, list[ast.expr]] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> Package:
        package = cls()
        for path in sorted(root.rglob("*.py")):
            module = ast.parse(path.read_text(), filename=str(path))
            package.modules[path] = module
            for node in ast.walk(module):
                for child in ast.iter_child_nodes(node):
                    package.parents[child] = node
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    package.functions.setdefault(node.name, []).append(node)
                elif isinstance(node, ast.ClassDef):
                    package.classes.setdefault(node.name, []).append(node)
            for statement in module.body:
                targets: list[ast.expr] = []
                value: ast.expr | None = None
                if isinstance(statement, ast.Assign):
                    targets, value = statement.targets, statement.value
                elif isinstance(statement, ast.AnnAssign):
                    targets, value = [statement.target], statement.value
                for target in targets:
                    if isinstance(target, ast.Name) and value is not None:
                        package.constants.setdefault(target.id, []).append(value)
        return package

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def calls(self) -> Iterator[tuple[Path, ast.Call]]:
        for path, module in self.modules.items():
            for node in ast.walk(module):
                if isinstance(node, ast.Call):
                    yield path, node


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The function's nodes, not those of functions or classes defined inside it."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    return names[1:] if names and names[0] in ("self", "cls") else names


def _signature(package: Package, name: str) -> list[str]:
    """The positional parameters of function or class ``name`` (a dataclass's fields, or its
    ``__init__``'s), as a call passes them."""
    found: list[list[str]] = [_params(f) for f in package.functions.get(name, [])]
    for class_ in package.classes.get(name, []):
        init = [s for s in class_.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
        if init:
            found.append(_params(init[0]))
        else:
            found.append(
                [
                    s.target.id
                    for s in class_.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                ]
            )
    if not found:
        raise AssertionError(f"{name} is not defined in the package any more: update the scan")
    if any(f != found[0] for f in found):
        raise AssertionError(f"{name} is defined twice with different parameters: {found}")
    return found[0]


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


@dataclass(frozen=True)
class Sink:
    params: list[str]  # positional, as a call passes them
    reason: str  # the parameter that is the condition's reason


def _argument(call: ast.Call, sink: Sink) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == sink.reason:
            return keyword.value
    params, name = sink.params, sink.reason
    index = params.index(name)
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return positional[index] if index < len(positional) else None


@dataclass
class Scan:
    package: Package
    reasons: dict[str, set[str]] = field(default_factory=dict)  # reason -> where set
    carried: set[str] = field(default_factory=set)  # CARRIED keys met
    wrappers: dict[str, str] = field(default_factory=dict)  # function -> its reason parameter

    def resolve(
        self, expr: ast.expr, function: ast.FunctionDef | ast.AsyncFunctionDef | None, seen: int = 0
    ) -> set[str]:
        if seen > 20:
            raise Unresolved("too deep")
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.IfExp):
            return self.resolve(expr.body, function, seen + 1) | self.resolve(
                expr.orelse, function, seen + 1
            )
        if isinstance(expr, ast.BoolOp):
            return set().union(*(self.resolve(v, function, seen + 1) for v in expr.values))
        if isinstance(expr, ast.Attribute) and expr.attr == PASSED_ON:
            return set()
        if isinstance(expr, ast.Attribute) and expr.attr in CARRIED:
            self.carried.add(expr.attr)
            return set()
        if isinstance(expr, ast.Call):
            return self._resolve_call(expr, function, seen)
        if isinstance(expr, ast.Name):
            return self._resolve_name(expr.id, function, seen)
        raise Unresolved(ast.unparse(expr))

    def _resolve_call(
        self, call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef | None, seen: int
    ) -> set[str]:
        name = _called(call)
        if name == "str" and len(call.args) == 1:
            return self.resolve(call.args[0], function, seen + 1)
        first = call.args[0] if call.args else None
        if name == "get" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            key = f"get:{first.value}"
            if key in CARRIED:
                self.carried.add(key)
                return set()
        if name in self.package.functions:
            return self._returned(name, None, seen)
        raise Unresolved(ast.unparse(call))

    def _returned(self, name: str, index: int | None, seen: int) -> set[str]:
        values: set[str] = set()
        for callee in self.package.functions[name]:
            for node in _own_nodes(callee):
                if isinstance(node, ast.Return) and node.value is not None:
                    value = node.value
                    if index is not None:
                        if not isinstance(value, ast.Tuple):
                            raise Unresolved(f"{name} returns {ast.unparse(value)}")
                        value = value.elts[index]
                    values |= self.resolve(value, callee, seen + 1)
        return values

    def _resolve_name(
        self, name: str, function: ast.FunctionDef | ast.AsyncFunctionDef | None, seen: int
    ) -> set[str]:
        if function is not None:
            if name in _params(function):
                if self.wrappers.get(function.name) == name:
                    return set()  # a wrapper's parameter: its callers are sinks themselves
                raise Unresolved(f"parameter {name} of {function.name}")
            assigned = list(self._assignments(function, name, seen))
            if assigned:
                return set().union(*assigned)
        if name in self.package.constants:
            return set().union(
                *(self.resolve(v, None, seen + 1) for v in self.package.constants[name])
            )
        raise Unresolved(name)

    def _assignments(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, seen: int
    ) -> Iterator[set[str]]:
        for node in _own_nodes(function):
            if isinstance(node, ast.Assign):
                pairs = [(t, node.value) for t in node.targets]
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                pairs = [(node.target, node.value)]
            else:
                continue
            for target, value in pairs:
                if isinstance(target, ast.Name) and target.id == name:
                    yield self.resolve(value, function, seen + 1)
                elif isinstance(target, ast.Tuple):
                    names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
                    if name in names:
                        callee = _called(value) if isinstance(value, ast.Call) else None
                        if callee not in self.package.functions:
                            raise Unresolved(f"{name} unpacked from {ast.unparse(value)}")
                        yield self._returned(callee, names.index(name), seen)

    def sink_calls(self, sinks: dict[str, Sink]) -> Iterator[tuple[Path, ast.Call, ast.expr]]:
        for path, call in self.package.calls():
            name = _called(call)
            if name not in sinks:
                continue
            argument = _argument(call, sinks[name])
            if argument is None:  # another callable of that name (e.g. a queue's put)
                continue
            yield path, call, argument

    def run(self) -> None:
        sinks = {name: Sink(_signature(self.package, name), "reason") for name in SINKS}
        # Functions that pass a parameter of theirs on as a reason are sinks too (to a fixpoint).
        while True:
            before = dict(self.wrappers)
            for _, call, argument in self.sink_calls(sinks):
                function = self.package.enclosing_function(call)
                if (
                    function is not None
                    and isinstance(argument, ast.Name)
                    and argument.id in _params(function)
                ):
                    self.wrappers[function.name] = argument.id
                    sinks[function.name] = Sink(_params(function), argument.id)
            if self.wrappers == before:
                break
        origins = {
            name: Sink(_signature(self.package, name), "reason") for name in CARRIED.values()
        }
        for path, call, argument in [*self.sink_calls(sinks), *self.sink_calls(origins)]:
            where = f"{_shown(path)}:{call.lineno}"
            try:
                values = self.resolve(argument, self.package.enclosing_function(call))
            except Unresolved as err:
                raise AssertionError(
                    f"{where}: cannot tell which condition reason {ast.unparse(argument)!r} "
                    f"is ({err}); pass a literal or a constant, or teach this scan"
                ) from err
            for value in values:
                self.reasons.setdefault(value, set()).add(where)
        missing = {CARRIED[key] for key in CARRIED} - {
            _called(c) for _, c, _ in self.sink_calls(origins)
        }
        assert not missing, f"no call of {missing} found: update CARRIED"


@pytest.fixture(scope="module")
def scan() -> Scan:
    result = Scan(Package.load(PACKAGE))
    result.run()
    return result


def _tables(text: str) -> Iterator[list[str]]:
    """Markdown tables as lists of lines, the header first."""
    table: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            table.append(line.strip())
        elif table:
            yield table
            table = []


def documented_reasons(files: list[Path]) -> dict[str, set[str]]:
    """Every `code` word in a table whose header names a condition or a reason."""
    found: dict[str, set[str]] = {}
    for path in files:
        for table in _tables(path.read_text()):
            header = table[0].lower()
            if "reason" not in header and "condition" not in header:
                continue
            for row in table[1:]:
                for word in re.findall(r"`([^`]+)`", row):
                    found.setdefault(word, set()).add(path.name)
    return found


def test_the_scan_finds_the_reasons_it_must(scan: Scan) -> None:
    """The scan reaches every way a reason is set today (literals, a writer's wrapper, the
    rollout's conditions, a failure carried as a cause, the cache program's result)."""
    for reason in (
        "ReconcileSucceeded",  # conditions.settle: a literal
        "Reconciling",  # Ready's reason, returned as a tuple by _readiness
        "LeaderWorkerSetAPIMissing",  # decide: through _ConditionWriter.put
        "RolloutPaused",  # rollout: x if c else y into ConditionChange
        "Abandoning",  # rollout: a module constant
        "ProgressDeadlineExceeded",  # a _Fail's reason, carried as the revision's cause
        "RolledBack",  # rollback_cause's fallback, a function's return value
        "HashMismatch",  # the cache program's CacheFailure, read back from the Job
        "DownloadFailed",  # CacheState: str(result.get("reason") or "DownloadFailed")
    ):
        assert reason in scan.reasons, reason
    assert scan.carried == set(CARRIED), scan.carried
    assert {"set_condition", "put"} <= set(scan.wrappers), scan.wrappers


def test_every_condition_reason_is_in_a_reason_table(scan: Scan) -> None:
    documented = documented_reasons([README, *DOCS])
    missing = {r: sorted(w) for r, w in scan.reasons.items() if r not in documented}
    assert not missing, (
        "condition reasons the code can set that no table in README.md or docs/*.md "
        f"(one whose header names a condition or a reason) lists: {missing}"
    )


def test_readme_is_a_front_door() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_DOC_PATH = re.compile(r"`((?:docs|benchmarks)/[\w./-]+\.md)`")


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            yield number, line


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def broken_links(path: Path) -> list[str]:
    broken = []
    for number, line in _prose(path.read_text()):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            if not (path.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{_shown(path)}:{number}: {target}")
        for target in _DOC_PATH.findall(line):
            if not (ROOT / target).exists():
                broken.append(f"{_shown(path)}:{number}: `{target}`")
    return broken


@pytest.mark.parametrize("path", [README, *DOCS, RESULTS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert not broken_links(path)


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](page.md) [anchor](#x) [web](https://example.com) [gone](nowhere.md#part)\n"
        "```\n[in code](also-nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["page.md:1: nowhere.md#part"]


def test_the_reason_tables_are_read_from_tables_only(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Prose names `InProse`.\n\n| condition | True |\n| --- | --- |\n| `A` | `B`: why |\n\n"
        "| value | default |\n| --- | --- |\n| `NotAReasonTable` | 1 |\n"
    )
    assert set(documented_reasons([page])) == {"A", "B"}

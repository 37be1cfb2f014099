"""The suite's cost, printed at the end of a CI run: each timed step (hack/timed.sh), each
integration group, and the slowest tests, from the JUnit XML files in ``.reports/``.

    python hack/suite_report.py [--reports DIR] [--slowest N]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path


def steps(reports: Path) -> list[tuple[str, float, str]]:
    path = reports / "timings.tsv"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, seconds, code = [*line.split("\t"), "", ""][:3]
        rows.append((name, float(seconds or 0), code))
    return rows


def test_cases(reports: Path) -> list[tuple[str, str, float, str]]:
    """(suite file, test id, seconds, outcome) for every test case in every XML report."""
    cases = []
    for xml in sorted(reports.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = child.tag
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
            cases.append((xml.stem, test_id, float(case.get("time") or 0), outcome))
    return cases


def report(reports: Path, slowest: int) -> str:
    lines = ["== suite report =="]
    rows = steps(reports)
    if rows:
        lines.append("steps (seconds, exit):")
        lines += [f"  {seconds:8.1f}  {code:>3}  {name}" for name, seconds, code in rows]
        lines.append(f"  {sum(s for _, s, _ in rows):8.1f}       total of the steps")
    cases = test_cases(reports)
    by_group: dict[str, list[float]] = {}
    for group, _, seconds, _ in cases:
        by_group.setdefault(group, []).append(seconds)
    if by_group:
        lines.append("tests by report (count, sum of test times):")
        for group, times in sorted(by_group.items()):
            lines.append(f"  {group}: {len(times)} tests, {sum(times):.0f}s")
    lines.append(f"slowest {slowest} tests (seconds):")
    for group, test_id, seconds, outcome in sorted(cases, key=lambda c: -c[2])[:slowest]:
        lines.append(f"  {seconds:7.1f}  {group}  {test_id}  [{outcome}]")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, default=Path(".reports"))
    parser.add_argument("--slowest", type=int, default=15)
    args = parser.parse_args()
    print(report(args.reports, args.slowest))


if __name__ == "__main__":
    main()

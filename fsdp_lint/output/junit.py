"""JUnit XML (ruff's ``--format junit``): ``<testsuites>`` holding one ``<testsuite>`` per
file with findings, one ``<testcase>`` per finding with a ``<failure>``; a clean run is one
suite with one passing case.  Counts (``tests``, ``failures``, ``errors``) agree with the
elements; CI systems (GitLab, Jenkins, Azure) read it as test results."""

from __future__ import annotations

import os
from itertools import groupby
from typing import List
from xml.etree import ElementTree as ET

from fsdp_lint.diagnostics import Diagnostic

PACKAGE = "org.fsdp-lint"


def render(diagnostics: List[Diagnostic], **_context) -> str:
    root = ET.Element("testsuites", name="fsdp-lint", tests=str(max(1, len(diagnostics))),
                      failures=str(len(diagnostics)), errors="0")
    if not diagnostics:
        suite = ET.SubElement(root, "testsuite", name="fsdp-lint", tests="1", disabled="0", errors="0",
                              failures="0", package=PACKAGE)
        ET.SubElement(suite, "testcase", name="No errors found", classname="fsdp-lint")
    for filename, group in groupby(sorted(diagnostics, key=lambda d: d.sort_key()), key=lambda d: d.filename):
        found = list(group)
        suite = ET.SubElement(root, "testsuite", name=filename, tests=str(len(found)), disabled="0", errors="0",
                              failures=str(len(found)), package=PACKAGE)
        classname = os.path.splitext(filename)[0].replace(os.sep, "/")
        for d in found:
            case = ET.SubElement(suite, "testcase", name=f"{PACKAGE}.{d.code}", classname=classname,
                                 line=str(d.location.row), column=str(d.location.column))
            failure = ET.SubElement(case, "failure", message=d.message)
            failure.text = f"line {d.location.row}, col {d.location.column}, {d.code} {d.message}"
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

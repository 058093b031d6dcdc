#!/usr/bin/python3
"""Checks reports written by mhc-verify: the JSON against its schema, the JUnit XML parses, its
counts add up, times are numbers (the run's is there, and each case's test has one), a problem is a test named
by its entry; the HTML parses, opens with the overview, its links resolve to unique ids, and it
holds plots. Usage: check_reports.py SCHEMA [--json F] [--junit F] [--html F [--plots]]
[--md F]. Exit 0 when every given file is right, 1 otherwise."""
import argparse
import json
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import jsonschema


def check_json(schema_path, path):
    schema = json.load(open(schema_path))
    report = json.load(open(path))
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(report), key=str)
    for e in errors[:5]:
        print(f"{path}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    if errors:
        return False
    s = report["summary"]
    ok = sum(1 for e in report["entries"] if e["ok"])
    cases = sum(len(e["cases"]) for e in report["entries"])
    if (s["entries"], s["ok"], s["cases"]) != (len(report["entries"]), ok, cases):
        print(f"{path}: summary {s} does not add up ({len(report['entries'])} entries, {ok} ok, {cases} cases)")
        return False
    return True


def check_junit(path):
    root = ET.parse(path).getroot()
    if root.tag != "testsuites":
        print(f"{path}: root is <{root.tag}>, expected <testsuites>")
        return False
    if root.get("time") is None:
        print(f"{path}: <testsuites> has no time")
        return False
    for el in root.iter():
        t = el.get("time")
        if t is not None and not float(t) >= 0:
            print(f"{path}: <{el.tag}> time={t}")
            return False
        if el.tag == "testcase" and el.get("name", "").startswith("case ") and t is None:
            print(f"{path}: the test {el.get('name')} of {el.get('classname')} has no time")
            return False
        if el.tag == "testcase" and el.get("name") == "problem":
            print(f"{path}: a test named 'problem' in {el.get('classname')}: name it by its entry")
            return False
    total = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        counts = {"tests": len(cases),
                  "failures": sum(1 for c in cases if c.find("failure") is not None),
                  "errors": sum(1 for c in cases if c.find("error") is not None),
                  "skipped": sum(1 for c in cases if c.find("skipped") is not None)}
        for k, v in counts.items():
            if int(suite.get(k)) != v:
                print(f"{path}: testsuite {suite.get('name')}: {k}={suite.get(k)}, counted {v}")
                return False
            total[k] += v
    for k, v in total.items():
        if int(root.get(k)) != v:
            print(f"{path}: testsuites {k}={root.get(k)}, counted {v}")
            return False
    return True


class Tags(HTMLParser):
    VOID = {"meta", "br", "line", "circle", "rect", "polyline", "img", "input", "hr", "link"}

    def __init__(self):
        super().__init__()
        self.stack, self.seen, self.bad = [], {}, []
        self.ids, self.links, self.first_table = [], [], None

    def handle_starttag(self, tag, attrs):
        self.seen[tag] = self.seen.get(tag, 0) + 1
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "a" and (a.get("href") or "").startswith("#"):
            self.links.append(a["href"][1:])
        if tag == "table" and self.first_table is None:
            self.first_table = a.get("id")
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.seen[tag] = self.seen.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.bad.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def check_html(path, need_plots):
    text = open(path, encoding="utf-8").read()
    p = Tags()
    p.feed(text)
    if p.bad or p.stack:
        print(f"{path}: malformed: {(p.bad + ['unclosed ' + ' '.join(p.stack)])[:3]}")
        return False
    if "http://" in text.replace("http://www.w3.org/2000/svg", "") or "https://" in text:
        print(f"{path}: refers to the network")
        return False
    if p.first_table != "overview":
        print(f"{path}: the first table is not the overview")
        return False
    if len(set(p.ids)) != len(p.ids):
        print(f"{path}: ids not unique")
        return False
    missing = sorted(set(p.links) - set(p.ids))
    if missing or len(p.links) < p.seen.get("details", 0):
        print(f"{path}: {len(p.links)} links for {p.seen.get('details', 0)} entries; unresolved {missing[:3]}")
        return False
    if need_plots and p.seen.get("svg", 0) == 0:
        print(f"{path}: no plots")
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("schema")
    ap.add_argument("--json")
    ap.add_argument("--junit")
    ap.add_argument("--html")
    ap.add_argument("--md")
    ap.add_argument("--plots", action="store_true", help="the HTML must hold plots")
    a = ap.parse_args()
    ok = True
    if a.json:
        ok &= check_json(a.schema, a.json)
    if a.junit:
        ok &= check_junit(a.junit)
    if a.html:
        ok &= check_html(a.html, a.plots)
    if a.md:
        ok &= open(a.md).read().startswith("# mhc-verify report: ")
    print("reports: " + ("ok" if ok else "WRONG"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The workflow of extensions/awx/workflow.yml: checks of its graph and its awx.awx form."""
from __future__ import annotations

LINKS = ("success_nodes", "failure_nodes", "always_nodes")


def workflow_errors(nodes: list[dict]) -> list[str]:
    """What is wrong with a simplified workflow: unknown or duplicate identifiers, nodes that are neither a job
    template nor an approval, links to unknown nodes, and cycles."""
    errors = []
    identifiers = [node.get("identifier") for node in nodes]
    errors += [f"duplicate identifier {i!r}" for i in sorted({i for i in identifiers if identifiers.count(i) > 1})]
    known = set(identifiers)
    for node in nodes:
        if ("job_template" in node) == ("approval" in node):
            errors.append(f"node {node.get('identifier')!r}: set exactly one of job_template or approval")
        errors += [f"node {node['identifier']!r}: {link} names unknown node {target!r}"
                   for link in LINKS for target in node.get(link, []) if target not in known]
    if not errors and find_cycle(nodes):
        errors.append("the workflow has a cycle: " + " -> ".join(find_cycle(nodes)))
    return errors


def successors(nodes: list[dict]) -> dict[str, list[str]]:
    return {node["identifier"]: [t for link in LINKS for t in node.get(link, [])] for node in nodes}


def find_cycle(nodes: list[dict]) -> list[str]:
    """A cycle as a list of identifiers (first repeated at the end), or [] for a DAG."""
    graph = successors(nodes)
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for target in graph[node]:
            if state.get(target) == "open":
                return path[path.index(target):] + [target] if target in path else [node, target]
            if target not in state:
                found = visit(target, path + [target])
                if found:
                    return found
        state[node] = "done"
        return []

    for start in graph:
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return []


def paths_to(nodes: list[dict], target: str) -> list[list[str]]:
    """Every path from a root (a node nobody links to) to ``target``."""
    graph = successors(nodes)
    roots = set(graph) - {t for targets in graph.values() for t in targets}
    paths: list[list[str]] = []

    def walk(path: list[str]) -> None:
        if path[-1] == target:
            paths.append(path)
            return
        for following in graph[path[-1]]:
            walk(path + [following])

    for root in sorted(roots):
        walk([root])
    return paths


def awx_workflow_nodes(nodes: list[dict], organization: str) -> list[dict]:
    """The ``workflow_nodes`` argument of awx.awx.workflow_job_template."""
    converted = []
    for node in nodes:
        if "approval" in node:
            template = {"type": "workflow_approval", **node["approval"]}
        else:
            template = {"type": "job_template", "name": node["job_template"], "organization": {"name": organization}}
        converted.append({
            "identifier": node["identifier"],
            "unified_job_template": template,
            "related": {link: [{"identifier": t} for t in node.get(link, [])] for link in LINKS},
        })
    return converted

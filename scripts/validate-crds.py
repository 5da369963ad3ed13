#!/usr/bin/env python3
"""Validates custom resources (KEDA, Prometheus Operator) against their upstream CRDs.

Reads Kubernetes YAML documents on stdin (the output of `kubectl kustomize`), picks the ones
whose apiVersion/kind one of the CRDs in CRD_DIR defines, and validates each object's body
against that CRD version's `openAPIV3Schema` with a JSON-Schema validator. Unknown fields are
rejected the way the API server prunes/rejects them: every object schema with `properties` and no
`x-kubernetes-preserve-unknown-fields` gets `additionalProperties: false`. Objects of kinds no CRD
defines are left to kubernetes-validate. Exits 1 on the first invalid object (all are reported).

usage: kubectl kustomize DIR | scripts/validate-crds.py CRD_DIR
"""

import copy
import pathlib
import sys

import jsonschema
import yaml


def strict(schema):
    """A copy of an OpenAPI v3 schema that rejects unknown fields, as the API server does."""
    s = copy.deepcopy(schema)

    def walk(node):
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string"):
            node.pop("type", None)
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        for key in ("properties", "patternProperties"):
            for child in node.get(key, {}).values():
                walk(child)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key])
        for key in ("allOf", "anyOf", "oneOf"):
            for child in node.get(key, []):
                walk(child)

    walk(s)
    # metadata is validated by the API server's ObjectMeta, not by the CRD schema.
    s.get("properties", {}).pop("metadata", None)
    s.setdefault("properties", {})["metadata"] = {"type": "object"}
    return s


def load_crds(directory):
    schemas = {}
    for path in sorted(pathlib.Path(directory).glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group = crd["spec"]["group"]
            kind = crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                schema = v.get("schema", {}).get("openAPIV3Schema")
                if schema:
                    schemas[(f"{group}/{v['name']}", kind)] = (strict(schema), path.name)
    return schemas


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    schemas = load_crds(sys.argv[1])
    if not schemas:
        sys.exit(f"no CRDs found in {sys.argv[1]}")
    failed = checked = 0
    for doc in yaml.safe_load_all(sys.stdin):
        if not doc:
            continue
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key not in schemas:
            continue
        schema, source = schemas[key]
        name = f"{doc['kind']}/{doc.get('metadata', {}).get('name')}"
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
        checked += 1
        if errors:
            failed += 1
            for e in errors:
                path = ".".join(str(p) for p in e.path) or "(root)"
                print(f"ERROR {name} ({source}): {path}: {e.message}")
        else:
            print(f"ok    {name} against {source}")
    print(f"crd-validate: {checked} checked, {failed} invalid")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

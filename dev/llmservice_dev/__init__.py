"""Development tooling of llmservice-operator: the local control plane (`localcluster`) and
the pod runner that gives fake GPU pods a live engine (`simrunner`).

Test and demo tooling only: it is never in the product's wheel or image, and import-linter
forbids the product (`llmservice_operator`) from importing it.
"""

"""Map the top-level plug-in folders onto the pase namespace.

solvers/, graphs/, cost_models/ and papers/ live at the top level so they are visible
at a glance, but install as pase.solvers, pase.graphs, pase.cost_models and
pase.papers. The package list is computed so a new subfolder can never silently miss
the wheel.
"""
from setuptools import find_packages, setup

PLUGIN_FOLDERS = ("solvers", "graphs", "cost_models", "papers")

packages = find_packages(include=["pase", "pase.*"])
package_dir = {"pase": "pase"}
for folder in PLUGIN_FOLDERS:
    for sub in [folder] + find_packages(where=".", include=[folder + ".*"]):
        name = "pase." + sub
        packages.append(name)
        package_dir[name] = sub.replace(".", "/")

setup(packages=sorted(set(packages)), package_dir=package_dir)

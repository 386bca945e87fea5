"""The health of the live machine: what NVML, sysfs and the environment say (a Snapshot), and checks on it."""

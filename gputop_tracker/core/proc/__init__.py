"""The kernel's own figures, read: /proc (procfs), cgroups (cgroup), VmHWM (vmhwm), CPU windows (cpuwindow).

The lowest floor of core: it imports nothing of the package but itself."""

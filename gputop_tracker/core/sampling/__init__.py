"""Where figures are measured: the sampler process (launch or attach, read /proc each interval, the job cgroup,
OOM detection, the command's output) and the pipe that carries its messages to the front end."""

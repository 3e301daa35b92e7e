"""RPS-Serve's harness: the `rps-serve` command line, the local stack, the workload, the simulator, the
load tools and the demo. It builds, runs and measures what `rps_serve` serves; production never imports it."""

"""Load generation against the Triton server and the FCFS-vs-RPS demo."""

"""The RPS policy, engine-agnostic: Priority Regulator, Queue Manager and preemption rule."""

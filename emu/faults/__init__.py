"""Faults during a run: the `--fault` schedule parsed and checked (`schedule`), resolved
against a fabric (`plan`), carried out on the live namespaces (`inject`) and what each
fault cost the control plane (`reconverge`)."""

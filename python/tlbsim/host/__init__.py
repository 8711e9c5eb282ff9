"""Host-side tooling: this machine's kernel measured with the native benchmarks of
``bench/``, fitted into a machine preset, and the simulator checked against it
(``tlbsim calibrate``, ``tlbsim validate``, and ``tlbsim reproduce linux``'s measurements).

The modules import in one direction, each only from those listed before it:

* :mod:`~tlbsim.host.tlb_geometry`: the vendors' documented TLB geometries (a table).
* :mod:`~tlbsim.host.fit`: the fits, pure functions from measurements to machine numbers.
* :mod:`~tlbsim.host.measure`: build and run the benchmarks, read the host.
* :mod:`~tlbsim.host.patterns`: the shootdown patterns as the simulator runs them.
* :mod:`~tlbsim.host.calibrate`: the preset (``tlbsim calibrate``).
* :mod:`~tlbsim.host.validate`: the simulator beside the measurements (``tlbsim validate``).

Nothing outside this package imports from it except the CLI and the ``linux`` paper's
hooks; python/tests/test_layering.py checks that no import, lazy ones included, closes a
circle.
"""

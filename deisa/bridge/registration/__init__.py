"""The registration of a step's blocks on the scheduler (``mode="async"``): rank 0's registrar
and the "block sent" notices the other ranks send it.

Runs in a simulation rank.
"""

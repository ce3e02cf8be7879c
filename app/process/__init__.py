"""How a replica runs: its startup, its database pools, the delivery process and what
links it to the HTTP process, and the readiness they report."""

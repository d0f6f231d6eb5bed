"""`kubectl tandem`: why a Pod is (not) running, in one command."""

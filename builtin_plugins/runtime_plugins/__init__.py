"""Runtime plugins: installed packages, their worker processes, invoke/cancel, status and logs."""

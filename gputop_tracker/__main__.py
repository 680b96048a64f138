from gputop_tracker._entry import run

run()

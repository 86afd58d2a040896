"""Replay of recorded group sessions against the reference coordinator or a live broker."""

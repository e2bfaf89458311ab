"""names"""
